//! The label sets of the metrics: each label value a type, so a typo cannot start a series.

use prometheus_client::encoding::EncodeLabelSet;

use super::*;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct PortLabels {
    pub(crate) port: Port,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct CertificateLabels {
    pub(crate) result: ReloadResult,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct InjectionLabels {
    pub(crate) sidecar: String,
    pub(crate) result: Label<SidecarResult>,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct ReloadLabels {
    pub(crate) source: &'static str,
    pub(crate) result: ReloadResult,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct SourceLabels {
    pub(crate) source: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct ModeLabels {
    pub(crate) mode: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct DriftLabels {
    pub(crate) sidecar: String,
    pub(crate) state: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct RolloutLabels {
    pub(crate) kind: Label<WorkloadKind>,
    pub(crate) result: RolloutResult,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct CampaignLabels {
    pub(crate) sidecar: String,
    pub(crate) state: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct SidecarLabels {
    pub(crate) sidecar: String,
}

/// The buckets of `sidecar_injector_kube_rate_limiter_duration_seconds`: 1 ms to 16 s, as
/// client-go's `rest_client_rate_limiter_duration_seconds` spans.
pub(crate) fn rate_limiter_histogram() -> Histogram {
    Histogram::new(exponential_buckets(0.001, 2.0, 15))
}

/// The buckets of the plan's and the drift gauge's times: 10 µs to 25 s at 1, 2.5 and 5 of each
/// decade. A plan or an update takes microseconds to milliseconds at 50,000 pods, and the tail
/// shows one that holds the index lock too long; bounds at round numbers (10 ms, 100 ms) say
/// whether a latency objective is met, where doubling bounds (10.24 ms) could not.
pub(crate) const INDEX_HOLD_BUCKETS: [f64; 20] = [
    0.000_01, 0.000_025, 0.000_05, 0.000_1, 0.000_25, 0.000_5, 0.001, 0.002_5, 0.005, 0.01, 0.025,
    0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 25.0,
];

/// The kube client's requests by API verb and resource (`sidecar_injector_kube_requests_total`).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct VerbLabels {
    pub(crate) verb: &'static str,
    pub(crate) resource: String,
}

/// What an update of the drift gauge counted again (`pods`, `revision`, `recount`).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct GaugeUpdateLabels {
    pub(crate) update: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct CallLabels {
    pub(crate) verb: EngineCall,
}
