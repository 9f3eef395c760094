//! A source file as the check reads it: comments and string literals blanked out, and the
//! items marked test-only (`#[cfg(test)]`, `#[cfg(all(test, ..))]`) left out.

/// The text with comments (`//`, doc comments, nested `/* */`) and string literals (plain,
/// byte and raw) blanked out; line breaks are kept.
pub(crate) fn without_comments(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars().peekable();
    // The last character of code kept, to tell a raw string's `r` from an identifier's.
    let mut previous = ' ';
    while let Some(c) = chars.next() {
        match c {
            '/' if chars.peek() == Some(&'/') => {
                for c in chars.by_ref() {
                    if c == '\n' {
                        out.push('\n');
                        break;
                    }
                }
            }
            '/' if chars.peek() == Some(&'*') => {
                chars.next();
                let mut nesting = 1usize;
                while nesting > 0 {
                    match chars.next() {
                        Some('\n') => out.push('\n'),
                        Some('*') if chars.peek() == Some(&'/') => {
                            chars.next();
                            nesting -= 1;
                        }
                        Some('/') if chars.peek() == Some(&'*') => {
                            chars.next();
                            nesting += 1;
                        }
                        Some(_) => {}
                        None => break,
                    }
                }
                out.push(' ');
            }
            // `r"..."`, `r#"..."#`, `br"..."`: an `r` that does not continue an identifier.
            'r' if !is_ident_char(previous)
                || (previous == 'b' && !out.chars().rev().nth(1).is_some_and(is_ident_char)) =>
            {
                let mut hashes = 0usize;
                let mut lookahead = chars.clone();
                while lookahead.peek() == Some(&'#') {
                    lookahead.next();
                    hashes += 1;
                }
                if lookahead.peek() != Some(&'"') {
                    out.push(c);
                    previous = c;
                    continue;
                }
                // A raw string: skip to a quote followed by as many hashes.
                for _ in 0..=hashes {
                    chars.next();
                }
                let mut open = true;
                while open {
                    match chars.next() {
                        Some('\n') => out.push('\n'),
                        Some('"') => {
                            let mut closing = 0usize;
                            while closing < hashes && chars.peek() == Some(&'#') {
                                chars.next();
                                closing += 1;
                            }
                            open = closing < hashes;
                        }
                        Some(_) => {}
                        None => open = false,
                    }
                }
                out.push_str("\"\"");
                previous = '"';
            }
            '"' => {
                let mut escaped = false;
                for c in chars.by_ref() {
                    if c == '\n' {
                        out.push('\n');
                    }
                    if escaped {
                        escaped = false;
                    } else if c == '\\' {
                        escaped = true;
                    } else if c == '"' {
                        break;
                    }
                }
                out.push_str("\"\"");
                previous = '"';
            }
            // A char literal holding a quote would start a string above.
            '\'' if chars.peek() == Some(&'"') => {
                chars.next();
                out.push_str("' '");
                previous = '\'';
            }
            _ => {
                out.push(c);
                previous = c;
            }
        }
    }
    out
}

fn is_ident_char(c: char) -> bool {
    c.is_alphanumeric() || c == '_'
}

/// Where the next attribute that marks an item as test-only starts in `text`, and its length:
/// `#[cfg(test)]`, or `#[cfg(all(test, ..))]` with any other conditions.
pub(crate) fn next_test_only(text: &str) -> Option<(usize, usize)> {
    let mut from = 0;
    while let Some(found) = text[from..].find("#[cfg(") {
        let at = from + found;
        let mut depth = 0usize;
        let mut end = None;
        for (offset, byte) in text.as_bytes()[at + 1..].iter().enumerate() {
            match byte {
                b'[' | b'(' => depth += 1,
                b']' | b')' => {
                    depth -= 1;
                    if depth == 0 {
                        end = Some(at + 1 + offset + 1);
                        break;
                    }
                }
                _ => {}
            }
        }
        let end = end?;
        let condition: String = text[at + "#[cfg(".len()..end - 2]
            .chars()
            .filter(|c| !c.is_whitespace())
            .collect();
        if condition == "test" || condition.starts_with("all(test,") {
            return Some((at, end - at));
        }
        from = end;
    }
    None
}

/// The text without the items marked test-only (a `use`, or a `mod .. { .. }` block).
pub(crate) fn without_test_code(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some((at, length)) = next_test_only(rest) {
        out.push_str(&rest[..at]);
        let item = &rest[at + length..];
        rest = &item[item_end(item)..];
    }
    out.push_str(rest);
    out
}

/// Where the item at the start of `text` ends: after its first `;` or `,` outside brackets
/// (a `use`, a field, a variant), or after the `}` that closes its first body, or before a
/// `}` that closes what encloses it.
pub(crate) fn item_end(text: &str) -> usize {
    let bytes = text.as_bytes();
    // `(` and `[` balance in valid code; `<` does not (`a < b`), so angle brackets only keep a
    // `,` inside generics (`Option<Map<u8, u8>>,`) from ending a field, and never hide the `;`,
    // `{` or `}` that ends an item.
    let mut depth = 0usize;
    let mut angles = 0usize;
    let mut at = 0;
    while at < bytes.len() {
        match bytes[at] {
            b'(' | b'[' => depth += 1,
            b')' | b']' => depth = depth.saturating_sub(1),
            b'<' => angles += 1,
            // `->` and `=>` are arrows, not the end of generics.
            b'>' if at > 0 && matches!(bytes[at - 1], b'-' | b'=') => {}
            b'>' => angles = angles.saturating_sub(1),
            b';' if depth == 0 => return at + 1,
            b',' if depth == 0 && angles == 0 => return at + 1,
            b'{' if depth == 0 => {
                let mut braces = 0usize;
                for (offset, &byte) in bytes[at..].iter().enumerate() {
                    match byte {
                        b'{' => braces += 1,
                        b'}' => {
                            braces -= 1;
                            if braces == 0 {
                                return at + offset + 1;
                            }
                        }
                        _ => {}
                    }
                }
                return bytes.len();
            }
            b'}' if depth == 0 => return at,
            _ => {}
        }
        at += 1;
    }
    bytes.len()
}
