//! Message headers: the `NATS/1.0` block of `HPUB` and `HMSG`, as name-value pairs.
//!
//! Invariants: [`Headers::encode`] writes only blocks the server and other clients read back
//! (names are tokens without `:`; neither names nor values hold CR or LF, which would end a
//! line early), and [`Headers::parse`] reads any block a server delivers without panicking.

use crate::Error;

/// Header name-value pairs in order, and the status a server puts on the first line (`503`
/// for "no responders").
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Headers {
    status: Option<u16>,
    description: Option<String>,
    pairs: Vec<(String, String)>,
}

impl Headers {
    /// An empty header block.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds `name: value` (a name may appear more than once).
    pub fn insert(&mut self, name: impl Into<String>, value: impl Into<String>) -> &mut Self {
        self.pairs.push((name.into(), value.into()));
        self
    }

    /// The first value of `name` (names compare case-sensitively, as NATS does).
    pub fn get(&self, name: &str) -> Option<&str> {
        self.pairs
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }

    /// Every pair, in order.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &str)> {
        self.pairs.iter().map(|(n, v)| (n.as_str(), v.as_str()))
    }

    /// The status code of the first line (`NATS/1.0 503`), if any.
    pub fn status(&self) -> Option<u16> {
        self.status
    }

    /// The text after the status code, if any.
    pub fn description(&self) -> Option<&str> {
        self.description.as_deref()
    }

    /// The block as it goes on the wire, or why it cannot.
    pub fn encode(&self) -> Result<Vec<u8>, Error> {
        let mut out = b"NATS/1.0\r\n".to_vec();
        for (name, value) in &self.pairs {
            let bad_name = name.is_empty()
                || name
                    .bytes()
                    .any(|b| b == b':' || b.is_ascii_whitespace() || b.is_ascii_control());
            if bad_name {
                return Err(Error::Invalid(format!(
                    "header name {name:?}: it must be non-empty, without ':', spaces or control \
                     characters"
                )));
            }
            if value.bytes().any(|b| b == b'\r' || b == b'\n') {
                return Err(Error::Invalid(format!(
                    "header {name:?}: its value must not hold CR or LF"
                )));
            }
            out.extend_from_slice(name.as_bytes());
            out.extend_from_slice(b": ");
            out.extend_from_slice(value.as_bytes());
            out.extend_from_slice(b"\r\n");
        }
        out.extend_from_slice(b"\r\n");
        Ok(out)
    }

    /// Reads a block as a server delivers it. Lines that are not `name: value` are skipped;
    /// text that is not UTF-8 is read lossily.
    pub fn parse(block: &[u8]) -> Result<Self, Error> {
        let text = String::from_utf8_lossy(block);
        let mut lines = text.split("\r\n");
        let first = lines.next().unwrap_or_default();
        let Some(rest) = first.strip_prefix("NATS/1.0") else {
            return Err(Error::Protocol(format!(
                "a header block that does not start with NATS/1.0: {:?}",
                first.chars().take(40).collect::<String>()
            )));
        };
        let rest = rest.trim();
        let (status, description) = match rest.split_once(' ') {
            Some((code, text)) => (code.parse().ok(), Some(text.trim().to_string())),
            None => (rest.parse().ok(), None),
        };
        let pairs = lines
            .filter_map(|line| line.split_once(':'))
            .map(|(name, value)| (name.trim().to_string(), value.trim().to_string()))
            .filter(|(name, _)| !name.is_empty())
            .collect();
        Ok(Self {
            status,
            description: description.filter(|d| !d.is_empty()),
            pairs,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn headers_round_trip_and_statuses_parse() {
        let mut headers = Headers::new();
        headers.insert("Node", "a").insert("Trace-Id", "1 2 3");
        let block = headers.encode().unwrap();
        assert_eq!(block, b"NATS/1.0\r\nNode: a\r\nTrace-Id: 1 2 3\r\n\r\n");
        let parsed = Headers::parse(&block).unwrap();
        assert_eq!(parsed, headers);
        assert_eq!(parsed.get("Trace-Id"), Some("1 2 3"));
        let status = Headers::parse(b"NATS/1.0 503\r\n\r\n").unwrap();
        assert_eq!(status.status(), Some(503));
        let status = Headers::parse(b"NATS/1.0 408 Request Timeout\r\n\r\n").unwrap();
        assert_eq!(
            (status.status(), status.description()),
            (Some(408), Some("Request Timeout"))
        );
        assert!(Headers::parse(b"HTTP/1.1 200\r\n\r\n").is_err());
    }

    #[test]
    fn names_and_values_that_would_break_the_block_are_refused() {
        for (name, value) in [("", "v"), ("a:b", "v"), ("a b", "v"), ("n", "x\r\ny: z")] {
            let mut headers = Headers::new();
            headers.insert(name, value);
            let error = headers.encode().unwrap_err().to_string();
            assert!(error.contains("header"), "{error}");
        }
    }
}
