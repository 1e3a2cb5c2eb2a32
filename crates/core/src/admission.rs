//! AdmissionReview in, AdmissionReview out. Pure: bytes and the config snapshot in, the reply
//! bytes and what happened (for logs and metrics) out.
//!
//! Only what the decision needs is parsed: the review envelope, and the pod through
//! [`PodView`], which skips everything else (managedFields included) without building it.

use std::borrow::Cow;

use serde::Deserialize;
use serde_json::value::RawValue;
use thiserror::Error;

use crate::config::SidecarSet;
use crate::injection::borrowed_str;
use crate::injection::{
    Decision, Denial, Injection, InjectionSettings, MAX_PATCH_BYTES, PodView, SkipReason, decide,
};

pub const API_VERSION_V1: &str = "admission.k8s.io/v1";
pub const API_VERSION_V1BETA1: &str = "admission.k8s.io/v1beta1";

/// A body that is not an AdmissionReview at all; answered with HTTP 400.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum ReviewError {
    #[error("cannot read the body as an AdmissionReview: {0}")]
    Unreadable(String),
    #[error(
        "the body is not an AdmissionReview (apiVersion {api_version:?}, kind {kind:?}); expected admission.k8s.io/v1 or v1beta1"
    )]
    NotAReview { api_version: String, kind: String },
    #[error("the AdmissionReview has no request")]
    NoRequest,
}

/// The review envelope, generic over how the object is read: as a [`PodView`] in one pass
/// (the normal case), or as raw JSON when that pass failed and the reason must be found.
#[derive(Deserialize)]
#[serde(
    rename_all = "camelCase",
    bound(deserialize = "O: Deserialize<'de>, 'de: 'a")
)]
struct ReviewIn<'a, O> {
    #[serde(default, borrow, deserialize_with = "borrowed_str")]
    api_version: Option<Cow<'a, str>>,
    #[serde(default, borrow, deserialize_with = "borrowed_str")]
    kind: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    request: Option<RequestIn<'a, O>>,
}

#[derive(Deserialize)]
#[serde(
    rename_all = "camelCase",
    bound(deserialize = "O: Deserialize<'de>, 'de: 'a")
)]
struct RequestIn<'a, O> {
    #[serde(borrow)]
    uid: Cow<'a, str>,
    #[serde(default, borrow)]
    kind: Option<KindIn<'a>>,
    #[serde(default, borrow, deserialize_with = "borrowed_str")]
    namespace: Option<Cow<'a, str>>,
    #[serde(default, borrow, deserialize_with = "borrowed_str")]
    operation: Option<Cow<'a, str>>,
    #[serde(default = "none")]
    object: Option<O>,
}

fn none<T>() -> Option<T> {
    None
}

#[derive(Deserialize)]
struct KindIn<'a> {
    #[serde(default, borrow)]
    group: Cow<'a, str>,
    #[serde(default, borrow)]
    version: Cow<'a, str>,
    #[serde(default, borrow)]
    kind: Cow<'a, str>,
}

/// What the webhook did with one review, for the reply, the log line and the metrics.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Answer {
    /// The AdmissionReview to send back (HTTP 200).
    pub body: Vec<u8>,
    pub result: AdmissionResult,
    pub uid: String,
    pub namespace: String,
    /// The pod's name, or its generateName for controller-made pods.
    pub pod: String,
    /// Per requested sidecar: the label for the metric and what happened to it.
    pub sidecars: Vec<(String, SidecarResult)>,
    /// The denial or the warning, when there is one.
    pub message: Option<AdmissionMessage>,
    /// Warnings beside the message (an injected sidecar whose campaign is paused).
    pub warnings: Vec<String>,
    /// The pod requested sidecars under another annotation namespace than ours.
    pub other_annotation_namespace: bool,
    /// Why, in the words of the `reason` label of Tumblr's `injections` series.
    pub tumblr_reason: &'static str,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum AdmissionResult {
    Injected,
    Skipped,
    Denied,
    NotAPod,
    InvalidPod,
}

impl AdmissionResult {
    pub fn as_str(self) -> &'static str {
        match self {
            AdmissionResult::Injected => "injected",
            AdmissionResult::Skipped => "skipped",
            AdmissionResult::Denied => "denied",
            AdmissionResult::NotAPod => "not_a_pod",
            AdmissionResult::InvalidPod => "invalid_pod",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SidecarResult {
    Injected,
    NotFound,
    NameClash,
    /// Its config refuses pods whose pod-level resources it does not fit.
    DoesNotFit,
}

impl SidecarResult {
    pub fn as_str(self) -> &'static str {
        match self {
            SidecarResult::Injected => "injected",
            SidecarResult::NotFound => "not_found",
            SidecarResult::NameClash => "name_clash",
            SidecarResult::DoesNotFit => "does_not_fit",
        }
    }
}

/// The longest object name or namespace a log line carries: the API server's own bound.
const MAX_NAME_CHARS: usize = 253;

/// The longest error text from the pod's parse a reply carries.
const MAX_ERROR_CHARS: usize = 1024;

/// Label for a requested sidecar no config defines: pod authors choose the text, so it never
/// becomes a label value of its own.
pub const UNKNOWN_SIDECAR_LABEL: &str = "(unknown)";

/// What the webhook tells the pod's creator (a warning) or the API server (a refusal), as
/// data: the webhook's edge words it, naming the settings as its deployment spells them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AdmissionMessage {
    /// Sidecars a Job's (or CronJob's) pods would run as regular containers, which keep them
    /// from completing.
    ClassicInJob {
        sidecars: Vec<String>,
        kind: String,
    },
    /// The request is not for a core Pod.
    NotAPodRequest {
        group_version: String,
        kind: String,
    },
    /// The object in the request is not a Pod.
    NotAPod {
        kind: String,
    },
    /// The pod cannot be read (the parser's words, bounded), or the request carries none.
    Unreadable(Option<String>),
    /// Requested sidecars no config defines, let through by the missing-sidecar policy.
    Missing(Vec<crate::name::SidecarName>),
    /// The request annotation does not parse, let through by the missing-sidecar policy.
    InvalidRequest {
        annotation: String,
        error: crate::name::NameError,
    },
    /// No request under our annotation (`ours`), but one under another prefix (`key`).
    OtherAnnotationNamespace {
        key: String,
        ours: String,
    },
    Denied(Denial),
}

/// How the webhook's edge words a message.
pub type Words = fn(&AdmissionMessage) -> String;

/// Answers one AdmissionReview body, its message worded by `words`.
pub fn review(
    body: &[u8],
    sidecars: &SidecarSet,
    settings: &InjectionSettings,
    words: Words,
) -> Result<Answer, ReviewError> {
    // The whole body is checked for UTF-8 at once: read from a `str`, the parser does not
    // check each string it keeps again (about 1 µs of the 8 KB review's 13).
    let body = std::str::from_utf8(body).map_err(|e| {
        ReviewError::Unreadable(format!(
            "the body is not UTF-8 (invalid byte at offset {})",
            e.valid_up_to()
        ))
    })?;
    // One pass over the body in the normal case. Only when it fails is the body read again,
    // with the object kept raw, to tell a broken envelope from a broken (or non-Pod) object.
    match serde_json::from_str::<ReviewIn<'_, PodView<'_>>>(body) {
        Ok(review) => review.answer(Ok, sidecars, settings, words),
        Err(_) => {
            let review: ReviewIn<'_, &RawValue> =
                serde_json::from_str(body).map_err(|e| ReviewError::Unreadable(e.to_string()))?;
            review.answer(read_raw_pod, sidecars, settings, words)
        }
    }
}

/// The second, diagnostic read of an object kept raw.
fn read_raw_pod<'a>(object: Option<&'a RawValue>) -> PodParse<'a> {
    match object {
        Some(raw) => serde_json::from_str::<PodView>(raw.get()).map(Some),
        None => Ok(None),
    }
}

impl<'a, O> ReviewIn<'a, O> {
    /// Answers the review, reading its object with `read_object`.
    fn answer(
        self,
        read_object: impl FnOnce(Option<O>) -> PodParse<'a>,
        sidecars: &SidecarSet,
        settings: &InjectionSettings,
        words: Words,
    ) -> Result<Answer, ReviewError> {
        let request = self.request.map(|r| {
            let (envelope, object) = r.into_parts();
            (envelope, read_object(object))
        });
        answer_review(
            self.api_version,
            self.kind,
            request,
            sidecars,
            settings,
            words,
        )
    }
}

/// The request's fields other than the object.
struct RequestEnvelope<'a> {
    uid: Cow<'a, str>,
    kind: Option<KindIn<'a>>,
    namespace: Option<Cow<'a, str>>,
    operation: Option<Cow<'a, str>>,
}

impl<'a, O> RequestIn<'a, O> {
    fn into_parts(self) -> (RequestEnvelope<'a>, Option<O>) {
        let envelope = RequestEnvelope {
            uid: self.uid,
            kind: self.kind,
            namespace: self.namespace,
            operation: self.operation,
        };
        (envelope, self.object)
    }
}

type PodParse<'a> = Result<Option<PodView<'a>>, serde_json::Error>;

fn answer_review(
    api_version: Option<Cow<'_, str>>,
    kind: Option<Cow<'_, str>>,
    request: Option<(RequestEnvelope<'_>, PodParse<'_>)>,
    sidecars: &SidecarSet,
    settings: &InjectionSettings,
    words: Words,
) -> Result<Answer, ReviewError> {
    let api_version = api_version.as_deref().unwrap_or_default();
    let kind = kind.as_deref().unwrap_or_default();
    if kind != "AdmissionReview" || ![API_VERSION_V1, API_VERSION_V1BETA1].contains(&api_version) {
        return Err(ReviewError::NotAReview {
            api_version: api_version.to_owned(),
            kind: kind.to_owned(),
        });
    }
    let (request, object) = request.ok_or(ReviewError::NoRequest)?;
    let mut answer = Answer {
        body: Vec::new(),
        result: AdmissionResult::Skipped,
        uid: request.uid.to_string(),
        namespace: request.namespace.as_deref().unwrap_or_default().to_owned(),
        pod: String::new(),
        sidecars: Vec::new(),
        message: None,
        warnings: Vec::new(),
        other_annotation_namespace: false,
        tumblr_reason: "no_annotation",
    };
    PATCH_SCRATCH.with_borrow_mut(|patch| {
        patch.clear();
        let outcome = decide_outcome(&request, object, &mut answer, sidecars, settings, patch);
        let message = answer.message.as_ref().map(words);
        answer.body = encode_reply(api_version, &answer, message.as_deref(), outcome, patch);
        // A huge patch (up to MAX_PATCH_BYTES) is not kept for the thread's lifetime.
        if patch.capacity() > KEPT_PATCH_CAPACITY {
            *patch = Vec::new();
        }
    });
    Ok(answer)
}

thread_local! {
    /// The patch of the review being answered on this thread, as JSON, before it is base64
    /// encoded into the reply: one buffer per thread, reused, so that a request allocates
    /// none for it.
    static PATCH_SCRATCH: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// The scratch buffer a thread keeps between requests: a few typical patches.
const KEPT_PATCH_CAPACITY: usize = 64 * 1024;

/// What the reply says, decided before it is encoded once.
enum Outcome {
    /// Allowed; with the JSON patch (in the scratch buffer) when something is injected.
    Allow { patched: bool },
    /// Refused with this HTTP-style code; the message is the answer's.
    Refuse { code: u16 },
}

/// The outcome of one request, filling in what the log line and the metrics report.
fn decide_outcome(
    request: &RequestEnvelope<'_>,
    object: PodParse<'_>,
    answer: &mut Answer,
    sidecars: &SidecarSet,
    settings: &InjectionSettings,
    patch: &mut Vec<u8>,
) -> Outcome {
    let allow = Outcome::Allow { patched: false };
    if let Some(kind) = request.kind.as_ref().filter(|k| k.group == "batch")
        && matches!(kind.kind.as_ref(), "Job" | "CronJob")
    {
        answer.result = AdmissionResult::NotAPod;
        if let Ok(Some(job)) = &object {
            answer.message = classic_in_job(job, &answer.namespace, sidecars, settings);
        }
        return allow;
    }
    if let Some(message) = request.kind.as_ref().and_then(not_a_pod_request) {
        answer.result = AdmissionResult::NotAPod;
        answer.message = Some(message);
        return allow;
    }
    // Only creation is injected: the webhook is registered for CREATE, and a running pod's
    // containers cannot change anyway.
    if request
        .operation
        .as_deref()
        .is_some_and(|op| op != "CREATE")
    {
        return allow;
    }
    let pod = match object {
        Ok(Some(pod)) => pod,
        // serde quotes the values it could not read: a pod's creator chooses their size.
        Err(err) => {
            let error = crate::name::elided(&err.to_string(), MAX_ERROR_CHARS);
            return invalid_pod(answer, Some(error));
        }
        Ok(None) => return invalid_pod(answer, None),
    };
    if let Some(kind) = pod.kind.as_deref().filter(|kind| *kind != "Pod") {
        answer.result = AdmissionResult::NotAPod;
        answer.message = Some(AdmissionMessage::NotAPod {
            kind: kind.to_owned(),
        });
        return allow;
    }
    // Unvalidated yet (the API server validates after mutating admission): bounded as the
    // API server bounds them, for the log line.
    answer.pod = crate::name::elided(
        pod.metadata
            .name
            .as_deref()
            .or(pod.metadata.generate_name.as_deref())
            .unwrap_or_default(),
        MAX_NAME_CHARS,
    );
    if answer.namespace.is_empty() {
        answer.namespace = crate::name::elided(
            pod.metadata.namespace.as_deref().unwrap_or_default(),
            MAX_NAME_CHARS,
        );
    }
    match decide(&pod, &answer.namespace, sidecars, settings) {
        Decision::Skip(reason) => skipped(answer, &reason),
        Decision::Inject(injection) => injected(answer, &injection, sidecars, patch),
        Decision::Deny(denial) => denied(answer, &denial),
    }
}

/// The warning for a Job or CronJob whose pods would get a classic sidecar: a container that
/// keeps running after the Job's own exit, so that the Job never completes. Passed unchanged
/// either way (its pods are injected when they are created).
fn classic_in_job(
    job: &PodView<'_>,
    namespace: &str,
    sidecars: &SidecarSet,
    settings: &InjectionSettings,
) -> Option<AdmissionMessage> {
    let spec = job.spec.as_ref()?;
    let template = match (&spec.template, &spec.job_template) {
        (Some(template), _) => template,
        (None, Some(job_template)) => job_template.spec.as_ref()?.template.as_ref()?,
        (None, None) => return None,
    };
    let Decision::Inject(injection) = decide(template, namespace, sidecars, settings) else {
        return None;
    };
    let pod = crate::injection::NativeFor {
        job_pod: true,
        ..crate::injection::NativeFor::of(template, &settings.keys, sidecars.nodes())
    };
    let classic = pod.keeping_the_job_running(&injection, sidecars);
    (!classic.is_empty()).then(|| AdmissionMessage::ClassicInJob {
        sidecars: classic,
        kind: job.kind.as_deref().unwrap_or("Job").to_owned(),
    })
}

/// The warning for a request that is not for a core Pod, which passes unchanged.
fn not_a_pod_request(object_kind: &KindIn<'_>) -> Option<AdmissionMessage> {
    if object_kind.kind == "Pod" && object_kind.group.is_empty() {
        return None;
    }
    let group_version = if object_kind.group.is_empty() {
        object_kind.version.to_string()
    } else {
        format!("{}/{}", object_kind.group, object_kind.version)
    };
    Some(AdmissionMessage::NotAPodRequest {
        group_version,
        kind: object_kind.kind.to_string(),
    })
}

fn skipped(answer: &mut Answer, reason: &SkipReason) -> Outcome {
    answer.tumblr_reason = match reason {
        SkipReason::NoRequest | SkipReason::OtherAnnotationNamespace { .. } => "no_annotation",
        SkipReason::AlreadyInjected => "already_injected",
        SkipReason::IgnoredNamespace(_) => "ignored_namespace",
        SkipReason::NothingFound(_) | SkipReason::InvalidRequest { .. } => "missing_config",
    };
    match reason {
        SkipReason::NothingFound(missing) => {
            answer.sidecars = missing
                .iter()
                .map(|_| (UNKNOWN_SIDECAR_LABEL.to_owned(), SidecarResult::NotFound))
                .collect();
            answer.message = Some(AdmissionMessage::Missing(missing.clone()));
        }
        SkipReason::InvalidRequest { annotation, error } => {
            answer.sidecars = vec![(UNKNOWN_SIDECAR_LABEL.to_owned(), SidecarResult::NotFound)];
            answer.message = Some(AdmissionMessage::InvalidRequest {
                annotation: annotation.clone(),
                error: error.clone(),
            });
        }
        SkipReason::OtherAnnotationNamespace { key, ours } => {
            answer.other_annotation_namespace = true;
            answer.message = Some(AdmissionMessage::OtherAnnotationNamespace {
                key: key.clone(),
                ours: ours.clone(),
            });
        }
        _ => {}
    }
    Outcome::Allow { patched: false }
}

/// Writes the patch into `patch` and fills in the answer.
fn injected(
    answer: &mut Answer,
    injection: &Injection<'_>,
    sidecars: &SidecarSet,
    patch: &mut Vec<u8>,
) -> Outcome {
    // Written whole, then encoded in one call: a base64 writer fed the many small writes
    // costs several times more. The writer stops at the limit, so an oversized patch
    // costs no more memory than the limit.
    let mut bounded = BoundedBuffer {
        bytes: patch,
        limit: MAX_PATCH_BYTES,
    };
    if injection.patch.write_json(&mut bounded).is_err() {
        patch.clear();
        return denied(answer, &Denial::PatchTooLarge);
    }
    answer.result = AdmissionResult::Injected;
    answer.tumblr_reason = "all_groovy";
    answer.sidecars = injection
        .injected
        .iter()
        .map(|(name, _)| (name.to_string(), SidecarResult::Injected))
        .chain(
            injection
                .missing
                .iter()
                .map(|_| (UNKNOWN_SIDECAR_LABEL.to_owned(), SidecarResult::NotFound)),
        )
        .collect();
    if !injection.missing.is_empty() {
        answer.message = Some(AdmissionMessage::Missing(injection.missing.clone()));
    }
    answer.warnings = injection
        .injected
        .iter()
        .filter_map(|(name, _)| sidecars.warning(name))
        .map(str::to_owned)
        .collect();
    Outcome::Allow { patched: true }
}

/// A buffer that refuses writes past `limit` bytes.
struct BoundedBuffer<'b> {
    bytes: &'b mut Vec<u8>,
    limit: usize,
}

// serde writes a patch in many pieces of a few bytes each: inlined, each is a bounds check
// and a copy.
impl std::io::Write for BoundedBuffer<'_> {
    #[inline]
    fn write(&mut self, data: &[u8]) -> std::io::Result<usize> {
        self.write_all(data)?;
        Ok(data.len())
    }

    #[inline]
    fn write_all(&mut self, data: &[u8]) -> std::io::Result<()> {
        if self.bytes.len() + data.len() > self.limit {
            return Err(std::io::Error::other("over the limit"));
        }
        self.bytes.extend_from_slice(data);
        Ok(())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

fn denied(answer: &mut Answer, denial: &Denial) -> Outcome {
    answer.result = AdmissionResult::Denied;
    answer.tumblr_reason = match denial {
        Denial::SidecarNotFound { .. } | Denial::InvalidRequest { .. } => "missing_config",
        _ => "patching_error",
    };
    answer.sidecars = match denial {
        Denial::SidecarNotFound { .. } => {
            vec![(UNKNOWN_SIDECAR_LABEL.to_owned(), SidecarResult::NotFound)]
        }
        Denial::ContainerNameClash { sidecar, .. } => {
            vec![(sidecar.clone(), SidecarResult::NameClash)]
        }
        Denial::PodResourcesMisfit(misfit) => misfit
            .sidecars
            .split(", ")
            .map(|sidecar| (sidecar.to_owned(), SidecarResult::DoesNotFit))
            .collect(),
        Denial::InvalidRequest { .. }
        | Denial::NoPodSpec
        | Denial::TooManyContainers { .. }
        | Denial::PatchTooLarge => Vec::new(),
    };
    answer.message = Some(AdmissionMessage::Denied(denial.clone()));
    Outcome::Refuse { code: 403 }
}

fn invalid_pod(answer: &mut Answer, message: Option<String>) -> Outcome {
    answer.result = AdmissionResult::InvalidPod;
    answer.tumblr_reason = "unmarshal_error";
    answer.message = Some(AdmissionMessage::Unreadable(message));
    Outcome::Refuse { code: 400 }
}

/// The AdmissionReview reply: the uid echoed, the request's apiVersion, and the outcome. A
/// message goes in the status of a refusal and in the warnings of an allowed request.
fn encode_reply(
    api_version: &str,
    answer: &Answer,
    message: Option<&str>,
    outcome: Outcome,
    patch: &[u8],
) -> Vec<u8> {
    let (allowed, patch, status, warnings) = match outcome {
        Outcome::Allow { patched } => (
            true,
            patched.then(|| base64_simd::STANDARD.encode_to_string(patch)),
            None,
            message
                .into_iter()
                .chain(answer.warnings.iter().map(String::as_str))
                .collect(),
        ),
        Outcome::Refuse { code } => (
            false,
            None,
            Some(StatusOut {
                code,
                message: message.unwrap_or_default(),
            }),
            Vec::new(),
        ),
    };
    let review = ReviewOut {
        api_version,
        kind: "AdmissionReview",
        response: ResponseOut {
            uid: &answer.uid,
            allowed,
            patch_type: patch.as_ref().map(|_| "JSONPatch"),
            patch,
            status,
            warnings,
        },
    };
    serde_json::to_vec(&review).expect("a reply of strings and numbers serializes")
}

#[derive(serde::Serialize)]
#[serde(rename_all = "camelCase")]
struct ReviewOut<'a> {
    api_version: &'a str,
    kind: &'static str,
    response: ResponseOut<'a>,
}

#[derive(serde::Serialize)]
#[serde(rename_all = "camelCase")]
struct ResponseOut<'a> {
    uid: &'a str,
    allowed: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    patch_type: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    patch: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    status: Option<StatusOut<'a>>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    warnings: Vec<&'a str>,
}

#[derive(serde::Serialize)]
struct StatusOut<'a> {
    code: u16,
    message: &'a str,
}
