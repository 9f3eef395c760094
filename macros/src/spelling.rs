//! How names are spelled and compared: case conversions for generated names and labels, and
//! the edit distance behind "did you mean" hints. Pure string functions, no tokens.

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
}
