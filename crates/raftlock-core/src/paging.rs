//! Opaque pagination cursors shared by every hierarchical list call.
//!
//! A cursor names the item it continues from and the direction: `a<key>` = items after key,
//! `b<key>` = items before key, hex-encoded so clients treat it as opaque.

use std::ops::Bound;

use imbl::OrdMap;

use crate::error::CoreError;

/// One page of a sorted collection.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Page<'a, V> {
    pub items: Vec<(&'a String, &'a V)>,
    /// Continues after the last item; empty when nothing follows.
    pub next_token: String,
    /// Continues before the first item; empty when nothing precedes.
    pub previous_token: String,
}

fn encode(direction: char, key: &str) -> String {
    let mut out = String::with_capacity(2 + 2 * key.len());
    for b in std::iter::once(direction as u8).chain(key.bytes()) {
        out.push_str(&format!("{b:02x}"));
    }
    out
}

enum Cursor {
    Start,
    After(String),
    Before(String),
}

fn decode(token: &str) -> Result<Cursor, CoreError> {
    if token.is_empty() {
        return Ok(Cursor::Start);
    }
    let bad = || CoreError::invalid("pagination_token", "is not a token this server issued");
    if !token.is_ascii() || !token.len().is_multiple_of(2) || token.len() > 1024 {
        return Err(bad());
    }
    let bytes: Vec<u8> = (0..token.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&token[i..i + 2], 16).map_err(|_| bad()))
        .collect::<Result<_, _>>()?;
    let text = String::from_utf8(bytes).map_err(|_| bad())?;
    let mut chars = text.chars();
    match chars.next() {
        Some('a') => Ok(Cursor::After(chars.as_str().to_string())),
        Some('b') => Ok(Cursor::Before(chars.as_str().to_string())),
        _ => Err(bad()),
    }
}

/// Returns up to `limit` items of `map` that satisfy `keep`, starting from `token`.
pub fn paginate<'a, V: Clone>(
    map: &'a OrdMap<String, V>,
    token: &str,
    limit: usize,
    keep: impl Fn(&V) -> bool,
) -> Result<Page<'a, V>, CoreError> {
    let kept = |&(_, v): &(&'a String, &'a V)| keep(v);
    let mut items: Vec<_>;
    let more_after;
    let more_before;
    match decode(token)? {
        Cursor::Start | Cursor::After(_) => {
            let from = match decode(token)? {
                Cursor::After(k) => Bound::Excluded(k),
                _ => Bound::Unbounded,
            };
            items = map
                .range((from, Bound::Unbounded))
                .filter(kept)
                .take(limit + 1)
                .collect();
            more_after = items.len() > limit;
            items.truncate(limit);
            more_before = match items.first() {
                Some((first, _)) => map.range::<_, String>(..*first).rev().any(|e| kept(&e)),
                None => false,
            };
        }
        Cursor::Before(k) => {
            items = map
                .range::<_, String>(..k)
                .rev()
                .filter(kept)
                .take(limit + 1)
                .collect();
            more_before = items.len() > limit;
            items.truncate(limit);
            items.reverse();
            more_after = match items.last() {
                Some((last, _)) => map
                    .range::<_, String>((Bound::Excluded(*last), Bound::Unbounded))
                    .any(|e| kept(&e)),
                None => false,
            };
        }
    }
    let next_token = match items.last() {
        Some((k, _)) if more_after => encode('a', k),
        _ => String::new(),
    };
    let previous_token = match items.first() {
        Some((k, _)) if more_before => encode('b', k),
        _ => String::new(),
    };
    Ok(Page {
        items,
        next_token,
        previous_token,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map(n: usize) -> OrdMap<String, usize> {
        (0..n).map(|i| (format!("k{i:03}"), i)).collect()
    }

    fn keys<V>(p: &Page<'_, V>) -> Vec<String> {
        p.items.iter().map(|(k, _)| k.to_string()).collect()
    }

    #[test]
    fn walks_forward_and_back() {
        let m = map(5);
        let p1 = paginate(&m, "", 2, |_| true).unwrap();
        assert_eq!(keys(&p1), ["k000", "k001"]);
        assert!(p1.previous_token.is_empty());
        let p2 = paginate(&m, &p1.next_token, 2, |_| true).unwrap();
        assert_eq!(keys(&p2), ["k002", "k003"]);
        let p3 = paginate(&m, &p2.next_token, 2, |_| true).unwrap();
        assert_eq!(keys(&p3), ["k004"]);
        assert!(p3.next_token.is_empty());
        let back = paginate(&m, &p3.previous_token, 2, |_| true).unwrap();
        assert_eq!(keys(&back), ["k002", "k003"]);
        let back = paginate(&m, &back.previous_token, 2, |_| true).unwrap();
        assert_eq!(keys(&back), ["k000", "k001"]);
        assert!(back.previous_token.is_empty());
    }

    #[test]
    fn filter_applies_to_pages_and_cursors() {
        let m = map(10);
        let p = paginate(&m, "", 3, |v| v % 2 == 0).unwrap();
        assert_eq!(keys(&p), ["k000", "k002", "k004"]);
        let p = paginate(&m, &p.next_token, 3, |v| v % 2 == 0).unwrap();
        assert_eq!(keys(&p), ["k006", "k008"]);
        assert!(p.next_token.is_empty());
    }

    #[test]
    fn garbage_tokens_are_invalid() {
        let m = map(1);
        for t in ["zz", "abc", "00", "7a", "0é0", "éé"] {
            assert!(
                matches!(paginate(&m, t, 1, |_| true), Err(CoreError::Invalid { .. })),
                "{t}"
            );
        }
    }
}
