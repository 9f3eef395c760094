//! The little JSON the client protocol needs: reading the server's `INFO` object and writing the
//! client's `CONNECT` object.
//!
//! Invariants:
//! - [`parse`] accepts any JSON text (RFC 8259) and refuses everything else with an error that
//!   says where; nesting is bounded ([`MAX_DEPTH`]) so hostile input cannot overflow the stack.
//! - [`quote`] writes a string that any JSON reader reads back as the same string, with every
//!   control character escaped, so a value can never end a protocol line early.

use std::collections::BTreeMap;
use std::fmt::Write;

/// How deeply arrays and objects may nest.
pub const MAX_DEPTH: usize = 32;

/// A parsed JSON value.
#[derive(Clone, Debug, PartialEq)]
pub enum Value {
    Null,
    Bool(bool),
    Number(f64),
    String(String),
    Array(Vec<Value>),
    Object(BTreeMap<String, Value>),
}

impl Value {
    /// The member `key` of an object.
    pub fn get(&self, key: &str) -> Option<&Value> {
        match self {
            Value::Object(members) => members.get(key),
            _ => None,
        }
    }

    pub fn as_str(&self) -> Option<&str> {
        match self {
            Value::String(text) => Some(text),
            _ => None,
        }
    }

    pub fn as_bool(&self) -> Option<bool> {
        match self {
            Value::Bool(value) => Some(*value),
            _ => None,
        }
    }

    /// A number that is a non-negative integer (as sizes and ports are).
    pub fn as_u64(&self) -> Option<u64> {
        match self {
            Value::Number(n) if *n >= 0.0 && n.fract() == 0.0 && *n <= u64::MAX as f64 => {
                Some(*n as u64)
            }
            _ => None,
        }
    }

    /// The strings of an array of strings (other elements are skipped).
    pub fn as_strings(&self) -> Vec<String> {
        match self {
            Value::Array(items) => items
                .iter()
                .filter_map(|item| item.as_str().map(str::to_string))
                .collect(),
            _ => Vec::new(),
        }
    }
}

/// Parses one JSON value that makes up all of `text` (whitespace around it allowed).
pub fn parse(text: &str) -> Result<Value, String> {
    let mut reader = Reader {
        bytes: text.as_bytes(),
        at: 0,
    };
    let value = reader.value(0)?;
    reader.skip_space();
    if reader.at != reader.bytes.len() {
        return Err(reader.error("text after the value"));
    }
    Ok(value)
}

/// `text` as a JSON string, quotes included.
pub fn quote(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 2);
    out.push('"');
    for c in text.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            // Every other control character (and the line separators some readers treat as
            // line ends) as a \u escape.
            c if c.is_control() || c == '\u{2028}' || c == '\u{2029}' => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl Reader<'_> {
    fn error(&self, what: &str) -> String {
        format!("invalid JSON at byte {}: {what}", self.at)
    }

    fn skip_space(&mut self) {
        while let Some(b' ' | b'\t' | b'\n' | b'\r') = self.bytes.get(self.at) {
            self.at += 1;
        }
    }

    fn peek(&self) -> Option<u8> {
        self.bytes.get(self.at).copied()
    }

    fn expect_word(&mut self, word: &str, value: Value) -> Result<Value, String> {
        if self.bytes[self.at..].starts_with(word.as_bytes()) {
            self.at += word.len();
            Ok(value)
        } else {
            Err(self.error("an unknown literal"))
        }
    }

    fn value(&mut self, depth: usize) -> Result<Value, String> {
        if depth > MAX_DEPTH {
            return Err(self.error(&format!("nested deeper than {MAX_DEPTH}")));
        }
        self.skip_space();
        match self.peek() {
            None => Err(self.error("a value was expected")),
            Some(b'n') => self.expect_word("null", Value::Null),
            Some(b't') => self.expect_word("true", Value::Bool(true)),
            Some(b'f') => self.expect_word("false", Value::Bool(false)),
            Some(b'"') => self.string().map(Value::String),
            Some(b'[') => {
                self.at += 1;
                let mut items = Vec::new();
                self.skip_space();
                if self.peek() == Some(b']') {
                    self.at += 1;
                    return Ok(Value::Array(items));
                }
                loop {
                    items.push(self.value(depth + 1)?);
                    self.skip_space();
                    match self.peek() {
                        Some(b',') => self.at += 1,
                        Some(b']') => {
                            self.at += 1;
                            return Ok(Value::Array(items));
                        }
                        _ => return Err(self.error("',' or ']' was expected")),
                    }
                }
            }
            Some(b'{') => {
                self.at += 1;
                let mut members = BTreeMap::new();
                self.skip_space();
                if self.peek() == Some(b'}') {
                    self.at += 1;
                    return Ok(Value::Object(members));
                }
                loop {
                    self.skip_space();
                    if self.peek() != Some(b'"') {
                        return Err(self.error("a member name was expected"));
                    }
                    let key = self.string()?;
                    self.skip_space();
                    if self.peek() != Some(b':') {
                        return Err(self.error("':' was expected"));
                    }
                    self.at += 1;
                    let value = self.value(depth + 1)?;
                    members.insert(key, value);
                    self.skip_space();
                    match self.peek() {
                        Some(b',') => self.at += 1,
                        Some(b'}') => {
                            self.at += 1;
                            return Ok(Value::Object(members));
                        }
                        _ => return Err(self.error("',' or '}' was expected")),
                    }
                }
            }
            Some(b'-' | b'0'..=b'9') => self.number(),
            Some(_) => Err(self.error("a value was expected")),
        }
    }

    fn number(&mut self) -> Result<Value, String> {
        let start = self.at;
        if self.peek() == Some(b'-') {
            self.at += 1;
        }
        let digits = |reader: &mut Self| {
            let from = reader.at;
            while let Some(b'0'..=b'9') = reader.peek() {
                reader.at += 1;
            }
            reader.at > from
        };
        if !digits(self) {
            return Err(self.error("a digit was expected"));
        }
        if self.peek() == Some(b'.') {
            self.at += 1;
            if !digits(self) {
                return Err(self.error("a digit was expected after '.'"));
            }
        }
        if let Some(b'e' | b'E') = self.peek() {
            self.at += 1;
            if let Some(b'+' | b'-') = self.peek() {
                self.at += 1;
            }
            if !digits(self) {
                return Err(self.error("a digit was expected in the exponent"));
            }
        }
        // The bytes are ASCII digits and signs, so this slice is UTF-8 and parses.
        let text = std::str::from_utf8(&self.bytes[start..self.at]).expect("ASCII");
        text.parse::<f64>()
            .map(Value::Number)
            .map_err(|_| self.error("a number out of range"))
    }

    fn hex4(&mut self) -> Result<u32, String> {
        let digits = self
            .bytes
            .get(self.at..self.at + 4)
            .and_then(|d| std::str::from_utf8(d).ok())
            .and_then(|d| u32::from_str_radix(d, 16).ok())
            .ok_or_else(|| self.error("four hex digits were expected after \\u"))?;
        self.at += 4;
        Ok(digits)
    }

    fn string(&mut self) -> Result<String, String> {
        self.at += 1; // the opening quote
        let mut out = Vec::new();
        loop {
            let Some(byte) = self.peek() else {
                return Err(self.error("an unterminated string"));
            };
            self.at += 1;
            match byte {
                b'"' => break,
                b'\\' => {
                    let Some(escape) = self.peek() else {
                        return Err(self.error("an unterminated escape"));
                    };
                    self.at += 1;
                    let c = match escape {
                        b'"' => '"',
                        b'\\' => '\\',
                        b'/' => '/',
                        b'b' => '\u{8}',
                        b'f' => '\u{c}',
                        b'n' => '\n',
                        b'r' => '\r',
                        b't' => '\t',
                        b'u' => {
                            let high = self.hex4()?;
                            let code = if (0xd800..0xdc00).contains(&high)
                                && self.bytes[self.at..].starts_with(b"\\u")
                            {
                                self.at += 2;
                                let low = self.hex4()?;
                                if !(0xdc00..0xe000).contains(&low) {
                                    return Err(self.error("an unpaired surrogate"));
                                }
                                0x10000 + ((high - 0xd800) << 10) + (low - 0xdc00)
                            } else {
                                high
                            };
                            char::from_u32(code)
                                .ok_or_else(|| self.error("an unpaired surrogate"))?
                        }
                        _ => return Err(self.error("an unknown escape")),
                    };
                    let mut encoded = [0; 4];
                    out.extend_from_slice(c.encode_utf8(&mut encoded).as_bytes());
                }
                0..=0x1f => return Err(self.error("a raw control character in a string")),
                byte => out.push(byte),
            }
        }
        // The input was a `&str` and escapes encode whole characters, so this is UTF-8.
        String::from_utf8(out).map_err(|_| self.error("a string that is not UTF-8"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_a_server_info() {
        let info = r#"{"server_id":"NAB","version":"2.9.10","port":4222,"headers":true,
            "max_payload":1048576,"auth_required":true,"connect_urls":["10.0.0.1:4222","[::1]:4223"],
            "ldm":false,"nonce":null,"ratio":-1.5e2,"nested":{"a":[1,{"b":"\u00e9\ud83d\ude00\n"}]}}"#;
        let value = parse(info).unwrap();
        assert_eq!(
            value.get("max_payload").and_then(Value::as_u64),
            Some(1 << 20)
        );
        assert_eq!(value.get("headers").and_then(Value::as_bool), Some(true));
        assert_eq!(value.get("version").and_then(Value::as_str), Some("2.9.10"));
        assert_eq!(
            value.get("connect_urls").map(Value::as_strings),
            Some(vec!["10.0.0.1:4222".to_string(), "[::1]:4223".to_string()])
        );
        assert_eq!(value.get("nonce"), Some(&Value::Null));
        assert_eq!(value.get("ratio"), Some(&Value::Number(-150.0)));
        let nested = value.get("nested").and_then(|n| n.get("a")).unwrap();
        let Value::Array(items) = nested else {
            panic!("an array: {nested:?}")
        };
        assert_eq!(items[1].get("b").and_then(Value::as_str), Some("é😀\n"));
    }

    #[test]
    fn refuses_what_is_not_json_and_says_where() {
        for (text, what) in [
            ("", "a value was expected"),
            ("{", "a member name was expected"),
            ("{\"a\" 1}", "':' was expected"),
            ("[1 2]", "',' or ']' was expected"),
            ("\"abc", "an unterminated string"),
            ("\"a\u{1}\"", "a raw control character"),
            ("\"\\x\"", "an unknown escape"),
            ("\"\\ud800\"", "an unpaired surrogate"),
            ("\"\\ud800\\u0041\"", "an unpaired surrogate"),
            ("-", "a digit was expected"),
            ("1.", "a digit was expected after '.'"),
            ("1e", "a digit was expected in the exponent"),
            ("tru", "an unknown literal"),
            ("{} {}", "text after the value"),
        ] {
            let error = parse(text).unwrap_err();
            assert!(error.contains(what), "{text:?}: {error}");
        }
        let deep = "[".repeat(MAX_DEPTH + 2);
        assert!(parse(&deep).unwrap_err().contains("nested deeper"));
    }

    #[test]
    fn quoted_strings_read_back_the_same_and_hold_no_control_characters() {
        for text in [
            "",
            "plain",
            "quote \" and backslash \\",
            "line\nbreak\r\ttab\u{0}\u{1f}\u{7f}\u{2028}",
            "é😀",
        ] {
            let quoted = quote(text);
            assert!(!quoted.chars().any(char::is_control), "{quoted:?}");
            assert_eq!(parse(&quoted).unwrap(), Value::String(text.to_string()));
        }
    }
}
