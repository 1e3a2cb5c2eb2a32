//! The I/O shell's side of the cluster: the counted client, watches feeding the drift index,
//! paged lists, the status ConfigMap, Events and the rollout Lease.

pub(crate) mod client;
pub(crate) mod drift_feed;
pub(crate) mod dry_run;
pub(crate) mod events;
pub(crate) mod foreign;
pub(crate) mod lease;
pub(crate) mod list;
pub(crate) mod nodes;
pub(crate) mod owners;
pub(crate) mod policy_writer;
pub(crate) mod standing;
pub(crate) mod status;
pub(crate) mod watch;
pub(crate) mod webhook_ca;

/// A write refused because the object changed since it was read (409): read again and retry.
/// `request`, failed as the API's own failures are when no answer comes within `limit`.
pub(crate) async fn with_timeout<T>(
    limit: std::time::Duration,
    request: impl std::future::Future<Output = Result<T, kube::Error>>,
) -> Result<T, kube::Error> {
    match tokio::time::timeout(limit, request).await {
        Ok(result) => result,
        Err(_) => Err(kube::Error::Service(
            format!("no answer within {limit:?}").into(),
        )),
    }
}

pub(crate) fn is_conflict(err: &kube::Error) -> bool {
    matches!(err, kube::Error::Api(status) if status.code == 409)
}

pub(crate) fn is_not_found(err: &kube::Error) -> bool {
    matches!(err, kube::Error::Api(status) if status.code == 404)
}

/// A request the API server refused to this user (403): no retry mends it, a grant does.
pub(crate) fn is_forbidden(err: &kube::Error) -> bool {
    matches!(err, kube::Error::Api(status) if status.code == 403)
}

/// An error as one line of a log, with each API error in it said as the API server said it.
pub(crate) fn error_text(err: &(dyn std::error::Error + 'static)) -> String {
    api_errors_said(err.to_string(), err)
}

/// `text` (an error's own words, or a line built from its causes) with every API error of
/// `err`'s causes said as the API server said it: `namespaces "x" not found (NotFound, 404)`.
/// kube prints one with a debug dump of the whole Status, several hundred characters on a line
/// that an operator reads for the message alone.
pub(crate) fn api_errors_said(mut text: String, err: &(dyn std::error::Error + 'static)) -> String {
    let mut cause = Some(err);
    while let Some(current) = cause {
        if let Some(kube::Error::Api(status)) = current.downcast_ref::<kube::Error>() {
            text = text.replace(&current.to_string(), &describe_status(status));
        }
        cause = current.source();
    }
    text
}

/// An API server's error as it said it: `pods is forbidden: ... (Forbidden, 403)`.
fn describe_status(status: &kube::core::Status) -> String {
    let reason = if status.reason.is_empty() {
        String::new()
    } else {
        format!("{}, ", status.reason)
    };
    format!("{} ({reason}{})", status.message, status.code)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn not_found() -> kube::Error {
        kube::Error::Api(Box::new(kube::core::Status {
            status: Some(kube::core::response::StatusSummary::Failure),
            code: 404,
            message: "namespaces \"injector-system\" not found".into(),
            metadata: None,
            reason: "NotFound".into(),
            details: None,
        }))
    }

    #[test]
    fn an_api_error_is_logged_as_the_api_server_said_it_wherever_it_is_quoted() {
        assert!(
            not_found().to_string().contains("Status {"),
            "kube prints the Status dump this replaces"
        );
        assert_eq!(
            error_text(&not_found()),
            "namespaces \"injector-system\" not found (NotFound, 404)"
        );
        #[derive(Debug, thiserror::Error)]
        #[error("cannot write the status ConfigMap: {0}")]
        struct Write(#[source] kube::Error);
        assert_eq!(
            error_text(&Write(not_found())),
            "cannot write the status ConfigMap: namespaces \"injector-system\" not found (NotFound, 404)"
        );
        let plain = std::io::Error::other("connection refused");
        assert_eq!(error_text(&plain), "connection refused");
    }
}
