//! Glob patterns as Redis matches them (`stringmatchlen`, for `KEYS`, `SCAN MATCH` and
//! `CONFIG GET`): `*` any bytes, `?` one byte, `[abc]`, `[a-z]` (ends in either order),
//! `[^x]` a set or its complement, `\` the next byte literally.
//!
//! A port, quirks included, so a pattern selects exactly the keys Redis's would: an
//! unclosed `[` takes the rest of the pattern as its set, `-` ranges compare bytes as C's
//! signed `char`, and a `*` that failed to match the rest from any later position stops the
//! search (Redis's bound on backtracking, which changes no answer). A pattern nested more
//! than [`MAX_NESTING`] `*`s deep matches nothing, as in Redis 7: the recursion, and the
//! stack it takes, stays bounded whatever a client sends.

/// Whether `pattern` is `*` alone, which Redis takes as every key without matching (the
/// empty key included, which no pattern matches).
pub fn all(pattern: &[u8]) -> bool {
    pattern == b"*"
}

/// How deep the `*`s of a pattern may nest before it matches nothing (Redis's limit).
pub const MAX_NESTING: usize = 1000;

/// Whether `string` matches `pattern`.
pub fn matches(pattern: &[u8], string: &[u8]) -> bool {
    let mut give_up = false;
    matches_from(pattern, string, &mut give_up, 0)
}

/// The pattern byte at `at`, or NUL past the end, as C reads the terminated string.
fn at(pattern: &[u8], at: usize) -> u8 {
    pattern.get(at).copied().unwrap_or(0)
}

fn matches_from(pattern: &[u8], string: &[u8], give_up: &mut bool, nesting: usize) -> bool {
    if nesting > MAX_NESTING {
        *give_up = true;
        return false;
    }
    let (mut p, mut s) = (0, 0);
    while p < pattern.len() && s < string.len() {
        match pattern[p] {
            b'*' => {
                while p < pattern.len() && at(pattern, p + 1) == b'*' {
                    p += 1;
                }
                if pattern.len() - p == 1 {
                    return true;
                }
                while s < string.len() {
                    if matches_from(&pattern[p + 1..], &string[s..], give_up, nesting + 1) {
                        return true;
                    }
                    if *give_up {
                        return false;
                    }
                    s += 1;
                }
                *give_up = true;
                return false;
            }
            b'?' => s += 1,
            b'[' => {
                p += 1;
                let not = at(pattern, p) == b'^';
                if not {
                    p += 1;
                }
                let mut matched = false;
                loop {
                    let left = pattern.len().saturating_sub(p);
                    if at(pattern, p) == b'\\' && left >= 2 {
                        p += 1;
                        matched |= pattern[p] == string[s];
                    } else if at(pattern, p) == b']' {
                        break;
                    } else if left == 0 {
                        // Unclosed: the set ends with the pattern.
                        p -= 1;
                        break;
                    } else if left >= 3 && pattern[p + 1] == b'-' {
                        // C's `char` is signed here: bytes past 0x7f sort below the rest.
                        let (a, b) = (pattern[p] as i8, pattern[p + 2] as i8);
                        let (low, high) = (a.min(b), a.max(b));
                        matched |= (low..=high).contains(&(string[s] as i8));
                        p += 2;
                    } else {
                        matched |= pattern[p] == string[s];
                    }
                    p += 1;
                }
                if matched == not {
                    return false;
                }
                s += 1;
            }
            byte => {
                let literal = if byte == b'\\' && pattern.len() - p >= 2 {
                    p += 1;
                    pattern[p]
                } else {
                    byte
                };
                if literal != string[s] {
                    return false;
                }
                s += 1;
            }
        }
        p += 1;
        if s == string.len() {
            while at(pattern, p) == b'*' && p < pattern.len() {
                p += 1;
            }
            break;
        }
    }
    p >= pattern.len() && s == string.len()
}

#[cfg(test)]
mod tests {
    use super::{MAX_NESTING, matches};

    /// A pattern of a hundred thousand `*a` against a key of a hundred thousand `a`s (which
    /// overflowed the stack) matches nothing, as in Redis: past [`MAX_NESTING`] the search
    /// stops; at the limit it still matches.
    #[test]
    fn deeply_nested_patterns_match_nothing_and_take_bounded_stack() {
        let key = vec![b'a'; 100_000];
        assert!(!matches(&b"*a".repeat(100_000), &key));
        assert!(!matches(&b"*a".repeat(MAX_NESTING + 2), &key));
        assert!(matches(&b"*a".repeat(MAX_NESTING / 2), &key));
    }

    #[test]
    fn globs_match_as_redis_matches_them() {
        let cases: &[(&str, &str, bool)] = &[
            // Redis's own answers: `KEYS *` lists the empty key only because it takes `*`
            // alone as "all keys" without matching (see `all`).
            ("*", "", false),
            ("**", "", false),
            ("*", "anything", true),
            ("h?llo", "hello", true),
            ("h?llo", "hllo", false),
            ("h*llo", "heeeello", true),
            ("h[ae]llo", "hallo", true),
            ("h[ae]llo", "hillo", false),
            ("h[^e]llo", "hallo", true),
            ("h[^e]llo", "hello", false),
            ("h[a-b]llo", "hbllo", true),
            ("h[b-a]llo", "hallo", true),
            ("h[a-b]llo", "hcllo", false),
            ("h\\*llo", "h*llo", true),
            ("h\\*llo", "hello", false),
            ("[\\]]", "]", true),
            ("a*", "a", true),
            ("a**", "a", true),
            ("*a", "", false),
            ("[abc", "c", true),
            ("[abc", "d", false),
            ("user:*:name", "user:42:name", true),
            ("user:*:name", "user:42:names", false),
            ("a\\", "a\\", true),
        ];
        for (pattern, string, expected) in cases {
            assert_eq!(
                matches(pattern.as_bytes(), string.as_bytes()),
                *expected,
                "{pattern:?} against {string:?}"
            );
        }
    }
}
