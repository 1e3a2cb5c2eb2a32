//! A revision's injected content as a sidecar to serve: how a hold or a pin (their content
//! kept in the status ConfigMap) becomes what the webhook injects.

use serde_json::Value;

use crate::config::{LoadedSidecar, SidecarConfig};

/// Why a held or pinned revision's content cannot be served.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("the content of revision {revision} of {sidecar} no longer loads: {reason}")]
pub struct ContentError {
    pub sidecar: String,
    pub revision: String,
    pub reason: String,
}

/// The sidecar `like` would be with `content` injected instead of its own: the same name,
/// origin and rollout policy. Refused unless the content hashes to `revision` (a content
/// edited by hand in the ConfigMap, or read by another hashing, is never served under a
/// revision it does not have).
pub fn sidecar_with_content(
    like: &LoadedSidecar,
    revision: &str,
    content: &Value,
) -> Result<LoadedSidecar, ContentError> {
    let error = |reason: String| ContentError {
        sidecar: like.config.name.to_string(),
        revision: revision.to_owned(),
        reason,
    };
    let Value::Object(fields) = content else {
        return Err(error("not a JSON object".to_owned()));
    };
    let mut document = fields.clone();
    document.insert("name".into(), Value::String(like.config.name.to_string()));
    let text = serde_json::to_string(&document).map_err(|e| error(e.to_string()))?;
    let parsed = crate::config::parse_config(like.origin.clone(), &text)
        .map_err(|e| error(e.to_string()))?;
    let config = SidecarConfig {
        rollout: like.config.rollout.clone(),
        ..parsed.config
    };
    let sidecar = LoadedSidecar::new(config, like.origin.clone());
    if sidecar.revision.as_str() != revision {
        return Err(error(format!(
            "it hashes to {}, not {revision}",
            sidecar.revision
        )));
    }
    Ok(sidecar)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::revision::injected_content;
    use crate::test_fixtures::loaded;

    const V1: &str = "name: logger:v1\ncontainers: [{name: shipper, image: 'shipper:1.0'}]\nvolumes: [{name: logs, emptyDir: {}}]\n";
    const V2: &str = "name: logger:v1\ncontainers: [{name: shipper, image: 'shipper:2.0'}]\nvolumes: [{name: logs, emptyDir: {}}]\n";

    #[test]
    fn content_from_the_history_loads_back_to_the_same_revision() {
        let v1 = loaded(V1);
        let v2 = loaded(V2);
        let content = injected_content(&v1.config);
        let back = sidecar_with_content(&v2, v1.revision.as_str(), &content).unwrap();
        assert_eq!(back.revision, v1.revision);
        assert_eq!(back.config.containers, v1.config.containers);
        assert_eq!(back.stamp, v1.stamp);
        // Content that does not hash to the revision claimed is refused.
        let err = sidecar_with_content(&v2, "aaaaaaaaaaaa", &content).unwrap_err();
        assert!(err.to_string().contains("hashes to"), "{err}");
    }

    #[test]
    fn a_native_form_held_or_rolled_back_to_stays_native() {
        let native = loaded(&V1.replace(
            "name: logger:v1\n",
            "name: logger:v1\nnativeSidecars: true\nnativeSidecarPlacement: last\n",
        ));
        let classic = loaded(V2);
        let content = injected_content(&native.config);
        let back = sidecar_with_content(&classic, native.revision.as_str(), &content).unwrap();
        assert_eq!(back.revision, native.revision);
        assert!(back.config.is_native());
        assert_eq!(
            back.config.native_placement(),
            crate::config::NativePlacement::Last
        );
    }
}
