//! How names and values are spelled and compared: case conversions for generated names and
//! labels, the edit distance behind "did you mean" hints, and durations written as text
//! (`"10s"`). Pure string functions, no tokens.

/// `OrderBook` to `order_book`: an actor's default label.
pub(crate) fn snake_case(name: &str) -> String {
    let mut out = String::new();
    for (index, character) in name.chars().enumerate() {
        if character.is_ascii_uppercase() {
            if index > 0 {
                out.push('_');
            }
            out.push(character.to_ascii_lowercase());
        } else {
            out.push(character);
        }
    }
    out
}

/// `place_order` to `PlaceOrder`: a handler's message variant (`Handler` for an empty name).
pub(crate) fn camel_case(name: &str) -> String {
    let mut out = String::new();
    let mut upper = true;
    for character in name.chars() {
        if character == '_' {
            upper = true;
        } else if upper {
            out.push(character.to_ascii_uppercase());
            upper = false;
        } else {
            out.push(character);
        }
    }
    if out.is_empty() {
        out.push_str("Handler");
    }
    out
}

/// ", did you mean `x`?" for the closest of `candidates` within two edits (or a third of the
/// word), or nothing.
pub(crate) fn did_you_mean(word: &str, candidates: &[&str]) -> String {
    candidates
        .iter()
        .map(|candidate| (edit_distance(word, candidate), candidate))
        .filter(|(distance, _)| *distance <= 2.max(word.len() / 3))
        .min()
        .map(|(_, candidate)| format!(" (did you mean `{candidate}`?)"))
        .unwrap_or_default()
}

/// Levenshtein distance, for "did you mean" suggestions.
pub(crate) fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut previous: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut current = vec![i + 1];
        for (j, cb) in b.iter().enumerate() {
            let substitution = previous[j] + usize::from(ca != *cb);
            current.push(substitution.min(previous[j + 1] + 1).min(current[j] + 1));
        }
        previous = current;
    }
    previous[b.len()]
}

/// Parses `"500ms"`, `"10s"` or `"2m"` into milliseconds (positive, whole numbers only).
pub(crate) fn duration_millis(text: &str) -> Option<u64> {
    let text = text.trim();
    let (number, scale) = if let Some(number) = text.strip_suffix("ms") {
        (number, 1)
    } else if let Some(number) = text.strip_suffix('s') {
        (number, 1_000)
    } else if let Some(number) = text.strip_suffix('m') {
        (number, 60_000)
    } else {
        return None;
    };
    if number.is_empty() || !number.bytes().all(|byte| byte.is_ascii_digit()) {
        return None;
    }
    let number: u64 = number.parse().ok()?;
    (number > 0).then_some(number)?.checked_mul(scale)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn near_misses_are_within_three_edits() {
        assert_eq!(edit_distance("worker_thread", "worker_threads"), 1);
        assert_eq!(edit_distance("catch_panic", "catch_panics"), 1);
        assert!(edit_distance("flavor", "worker_threads") > 3);
    }

    #[test]
    fn cases_convert_both_ways() {
        assert_eq!(snake_case("OrderBook"), "order_book");
        assert_eq!(camel_case("place_order"), "PlaceOrder");
        assert_eq!(camel_case("_"), "Handler");
    }

    #[test]
    fn durations_take_a_positive_whole_number_and_a_unit() {
        assert_eq!(duration_millis("10s"), Some(10_000));
        assert_eq!(duration_millis("500ms"), Some(500));
        assert_eq!(duration_millis("2m"), Some(120_000));
        for bad in ["ten", "10", "0s", "1.5s", "-1s", "+5s", "5 s", "s", ""] {
            assert_eq!(duration_millis(bad), None, "{bad}");
        }
    }
}
