//! The server's `Permissions Violation` errors, read: which operation on which subject the
//! account may not perform, so that the client fails what they concern at once
//! (`Shared::permission_denied`) rather than let it wait for an answer that cannot come.

/// What the server's `Permissions Violation` names.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Operation {
    Publish,
    /// A publish whose reply subject the account may not use (a request's inbox).
    PublishReply,
    Subscribe,
}

impl Operation {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Operation::Publish => "publish",
            Operation::PublishReply => "publish with the reply subject",
            Operation::Subscribe => "subscribe",
        }
    }
}

/// The operation and subject of a `-ERR` that reports a permissions violation, as
/// nats-server words it: `Permissions Violation for Publish to "<subject>"`, `... for Publish
/// with Reply of "<reply subject>"` or `... for Subscription to "<subject>"` (with ` using
/// queue "<group>"` after a queue subscription; the reply form is read as nats-server's
/// source words it, not seen from the 2.9 server in tests). A subject with a `"` in it is not
/// read (subjects this client sends never have one).
pub(crate) fn permission_violation(text: &str) -> Option<(Operation, &str)> {
    let text = text.trim().trim_matches('\'');
    let rest = text.strip_prefix("Permissions Violation for ")?;
    let (operation, rest) = if let Some(rest) = rest.strip_prefix("Publish to ") {
        (Operation::Publish, rest)
    } else if let Some(rest) = rest.strip_prefix("Publish with Reply of ") {
        (Operation::PublishReply, rest)
    } else {
        (Operation::Subscribe, rest.strip_prefix("Subscription to ")?)
    };
    let rest = rest.strip_prefix('"')?;
    let end = rest.find('"')?;
    Some((operation, &rest[..end]))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_permissions_violation_is_read_as_its_operation_and_subject() {
        assert_eq!(
            permission_violation("'Permissions Violation for Publish to \"a.b\"'"),
            Some((Operation::Publish, "a.b"))
        );
        assert_eq!(
            permission_violation(
                "Permissions Violation for Subscription to \"x.>\" using queue \"q\""
            ),
            Some((Operation::Subscribe, "x.>"))
        );
        assert_eq!(
            permission_violation("Permissions Violation for Publish with Reply of \"_INBOX.x.1\""),
            Some((Operation::PublishReply, "_INBOX.x.1"))
        );
        assert_eq!(permission_violation("Slow Consumer"), None);
        assert_eq!(
            permission_violation("Permissions Violation for Publish to \"unterminated"),
            None
        );
    }
}
