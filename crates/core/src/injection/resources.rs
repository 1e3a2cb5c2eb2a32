//! A pod's effective resource requests, counted as the scheduler and the kubelet count them
//! (KEP-753, sidecar containers): a native sidecar runs beside everything after it, so each
//! init container's peak is its own request plus every native sidecar declared before it, and
//! the app containers run with every native sidecar. The pod needs the larger of the two.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Container, PodSpec};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

/// Each resource the pod requests, in thousandths of its unit (millicores, millibytes).
pub type Requests = BTreeMap<String, i128>;

/// One container as the kubelet counts it: what it requests (its limit where it requests
/// nothing, as the API server defaults it), its limits, and whether it runs beside what
/// follows it (a native sidecar).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Counted {
    pub requests: Requests,
    pub limits: Requests,
    pub native: bool,
}

impl Counted {
    pub fn of(container: &Container, native: bool) -> Self {
        let resources = container.resources.as_ref();
        Self::from_maps(
            resources.and_then(|r| r.requests.as_ref()).map(parsed),
            resources.and_then(|r| r.limits.as_ref()).map(parsed),
            native,
        )
    }

    /// From parsed requests and limits.
    pub fn from_maps(requests: Option<Requests>, limits: Option<Requests>, native: bool) -> Self {
        let limits = limits.unwrap_or_default();
        let mut requests = requests.unwrap_or_default();
        for (name, limit) in &limits {
            requests.entry(name.clone()).or_insert(*limit);
        }
        Self {
            requests,
            limits,
            native,
        }
    }
}

/// The requests of init containers (in order) and app containers together, as the
/// kubelet and the API server's validation count them: the larger, per resource, of the init
/// containers' peak and of the app containers with every native sidecar.
pub fn aggregate<'a>(
    init: impl IntoIterator<Item = &'a Counted>,
    app: impl IntoIterator<Item = &'a Counted>,
) -> Requests {
    let mut sidecars = Requests::new();
    let mut init_peak = Requests::new();
    for container in init {
        if container.native {
            add(&mut sidecars, &container.requests);
            max_into(&mut init_peak, &sidecars);
        } else {
            let mut peak = sidecars.clone();
            add(&mut peak, &container.requests);
            max_into(&mut init_peak, &peak);
        }
    }
    let mut running = sidecars;
    for container in app {
        add(&mut running, &container.requests);
    }
    max_into(&mut running, &init_peak);
    running
}

/// The pod's effective requests: [`aggregate`] of its containers, plus the pod's overhead.
/// A request that does not parse counts as none.
pub fn effective_requests(spec: &PodSpec) -> Requests {
    let init: Vec<Counted> = spec
        .init_containers
        .iter()
        .flatten()
        .map(|c| Counted::of(c, crate::config::is_native_sidecar(c)))
        .collect();
    let app: Vec<Counted> = spec
        .containers
        .iter()
        .map(|c| Counted::of(c, false))
        .collect();
    let mut running = aggregate(&init, &app);
    if let Some(overhead) = &spec.overhead {
        add(&mut running, &parsed(overhead));
    }
    running
}

fn parsed(quantities: &BTreeMap<String, Quantity>) -> Requests {
    quantities
        .iter()
        .filter_map(|(name, q)| Some((name.clone(), milli(&q.0)?)))
        .collect()
}

pub fn add(sum: &mut Requests, more: &Requests) {
    for (name, value) in more {
        *sum.entry(name.clone()).or_default() += value;
    }
}

fn max_into(into: &mut Requests, other: &Requests) {
    for (name, value) in other {
        let entry = into.entry(name.clone()).or_default();
        *entry = (*entry).max(*value);
    }
}

/// A Kubernetes quantity (`250m`, `1.5`, `128Mi`, `1G`, `2e3`) in thousandths of its unit,
/// rounded up as Kubernetes rounds; `None` when it is not one.
pub fn milli(text: &str) -> Option<i128> {
    let text = text.trim();
    let split = text
        .find(|c: char| !(c.is_ascii_digit() || c == '.' || c == '+' || c == '-'))
        .unwrap_or(text.len());
    let (number, suffix) = text.split_at(split);
    let (scale_num, scale_den): (i128, i128) = match suffix {
        "" => (1000, 1),
        "m" => (1, 1),
        "k" => (1_000_000, 1),
        "M" => (1_000_000_000, 1),
        "G" => (1_000_000_000_000, 1),
        "T" => (1_000_000_000_000_000, 1),
        "P" => (1_000_000_000_000_000_000, 1),
        "E" => (1_000_000_000_000_000_000_000, 1),
        "Ki" => (1000 << 10, 1),
        "Mi" => (1000 << 20, 1),
        "Gi" => (1000 << 30, 1),
        "Ti" => (1000 << 40, 1),
        "Pi" => (1000 << 50, 1),
        "Ei" => (1000 << 60, 1),
        exponent if exponent.starts_with(['e', 'E']) => {
            let power: u32 = exponent[1..].parse().ok().filter(|p| *p <= 18)?;
            (1000 * 10_i128.pow(power), 1)
        }
        _ => return None,
    };
    let (whole, fraction) = number.split_once('.').unwrap_or((number, ""));
    let negative = whole.starts_with('-');
    let whole = whole.trim_start_matches(['+', '-']);
    if whole.is_empty() && fraction.is_empty() {
        return None;
    }
    if !whole
        .bytes()
        .chain(fraction.bytes())
        .all(|b| b.is_ascii_digit())
        || fraction.len() > 18
    {
        return None;
    }
    let digits: i128 = format!("{whole}{fraction}").parse().ok()?;
    let divisor = 10_i128.pow(u32::try_from(fraction.len()).ok()?) * scale_den;
    let value = (digits.checked_mul(scale_num)? + divisor - 1) / divisor;
    Some(if negative { -value } else { value })
}

/// A request as a person reads it: CPU in cores or millicores, anything else in bytes with
/// the largest binary suffix that divides it.
pub fn describe(resource: &str, milli: i128) -> String {
    if resource == "cpu" {
        return if milli % 1000 == 0 {
            (milli / 1000).to_string()
        } else {
            format!("{milli}m")
        };
    }
    let units = (milli + 999) / 1000;
    for (suffix, shift) in [("Ti", 40), ("Gi", 30), ("Mi", 20), ("Ki", 10)] {
        if units != 0 && units % (1 << shift) == 0 {
            return format!("{}{suffix}", units >> shift);
        }
    }
    units.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn quantities_read_as_kubernetes_writes_them() {
        assert_eq!(milli("250m"), Some(250));
        assert_eq!(milli("1"), Some(1000));
        assert_eq!(milli("1.5"), Some(1500));
        assert_eq!(milli("0.1"), Some(100));
        assert_eq!(milli("128Mi"), Some(128 * 1000 * 1024 * 1024));
        assert_eq!(milli("1G"), Some(1_000_000_000_000));
        assert_eq!(milli("2e3"), Some(2_000_000));
        assert_eq!(milli("lots"), None);
        assert_eq!(milli("1Zi"), None);
        assert_eq!(milli(""), None);
        assert_eq!(describe("cpu", 1500), "1500m");
        assert_eq!(describe("cpu", 2000), "2");
        assert_eq!(describe("memory", milli("384Mi").unwrap()), "384Mi");
        assert_eq!(describe("memory", milli("1G").unwrap()), "1000000000");
    }

    fn container(name: &str, cpu: &str, memory: &str, native: bool) -> serde_json::Value {
        let mut c = json!({"name": name, "image": "x", "resources": {"requests": {"cpu": cpu, "memory": memory}}});
        if native {
            c["restartPolicy"] = json!("Always");
        }
        c
    }

    #[test]
    fn native_sidecars_add_to_every_later_init_container_and_to_the_app() {
        let spec: PodSpec = serde_json::from_value(json!({
            "initContainers": [
                container("setup", "500m", "64Mi", false),
                container("proxy", "100m", "64Mi", true),
                container("migrate", "1", "256Mi", false),
            ],
            "containers": [container("app", "200m", "128Mi", false)],
        }))
        .unwrap();
        let requests = effective_requests(&spec);
        // cpu: migrate's peak, 1 + the proxy's 100m = 1100m, beats 100m + 200m.
        assert_eq!(requests["cpu"], 1100);
        // memory: migrate with the proxy, 256Mi + 64Mi = 320Mi, beats 64Mi + 128Mi.
        assert_eq!(describe("memory", requests["memory"]), "320Mi");
        // Classic, the same proxy is an app container: init peak 1, app sum 300m.
        let classic: PodSpec = serde_json::from_value(json!({
            "initContainers": [
                container("setup", "500m", "64Mi", false),
                container("migrate", "1", "256Mi", false),
            ],
            "containers": [
                container("app", "200m", "128Mi", false),
                container("proxy", "100m", "64Mi", false),
            ],
        }))
        .unwrap();
        let requests = effective_requests(&classic);
        assert_eq!(requests["cpu"], 1000);
        assert_eq!(describe("memory", requests["memory"]), "256Mi");
    }
}
