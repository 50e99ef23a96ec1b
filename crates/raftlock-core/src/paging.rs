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

/// Most entries one list call looks at, matching or not. A filtered list (leases of one
/// process among ~650k in a namespace, the most the byte budget allows) would otherwise walk
/// the whole namespace while the caller holds the state lock, and every tenant's writes wait
/// for it. Past the cap the page ends early — possibly empty — with a token to continue
/// after the last entry looked at, so a client following tokens still sees every match.
pub const MAX_SCANNED: usize = 4096;

/// A list method's answer: one page of views and the tokens of the pages beside it (next,
/// previous).
pub type Listed<T> = (Vec<T>, String, String);

/// One page of `map` as every list method answers it: the page size checked (0 means 100),
/// the entries `keep` accepts from `token` on, each turned into its view.
pub fn list_page<V: Clone, T>(
    map: &OrdMap<String, V>,
    token: &str,
    limit: u32,
    keep: impl Fn(&V) -> bool,
    view: impl Fn(&String, &V) -> T,
) -> Result<Listed<T>, CoreError> {
    let limit = crate::validate::page_limit(limit)?;
    let page = paginate(map, token, limit, keep)?;
    let views = page.items.into_iter().map(|(k, v)| view(k, v)).collect();
    Ok((views, page.next_token, page.previous_token))
}

/// Returns up to `limit` items of `map` that satisfy `keep`, starting from `token`, looking
/// at no more than [`MAX_SCANNED`] entries.
pub fn paginate<'a, V: Clone>(
    map: &'a OrdMap<String, V>,
    token: &str,
    limit: usize,
    keep: impl Fn(&V) -> bool,
) -> Result<Page<'a, V>, CoreError> {
    paginate_scanning(map, token, limit, keep, MAX_SCANNED)
}

/// What one walk in one direction found.
struct Walk<'a, V> {
    /// Matching items, in walk order, at most `limit`.
    items: Vec<(&'a String, &'a V)>,
    /// The walk stopped with entries left that it did not judge: past another match, or at
    /// the scan cap.
    more: bool,
    /// The last entry looked at when the cap stopped the walk (the cursor goes on from it).
    stopped_at: Option<&'a String>,
}

fn walk<'a, V: 'a>(
    entries: impl Iterator<Item = (&'a String, &'a V)>,
    limit: usize,
    keep: &impl Fn(&V) -> bool,
    max_scan: usize,
) -> Walk<'a, V> {
    let mut items = Vec::new();
    let mut last = None;
    for (scanned, (k, v)) in entries.enumerate() {
        if scanned == max_scan {
            return Walk {
                items,
                more: true,
                stopped_at: last,
            };
        }
        last = Some(k);
        if keep(v) {
            if items.len() == limit {
                return Walk {
                    items,
                    more: true,
                    stopped_at: None,
                };
            }
            items.push((k, v));
        }
    }
    Walk {
        items,
        more: false,
        stopped_at: None,
    }
}

/// Whether any entry of `entries` within `max_scan` matches; an unfinished scan counts as
/// yes (the client then gets a token and, following it, maybe an empty page).
fn any_within<'a, V: 'a>(
    mut entries: impl Iterator<Item = (&'a String, &'a V)>,
    keep: &impl Fn(&V) -> bool,
    max_scan: usize,
) -> bool {
    for _ in 0..max_scan {
        match entries.next() {
            Some((_, v)) if keep(v) => return true,
            Some(_) => {}
            None => return false,
        }
    }
    entries.next().is_some()
}

fn paginate_scanning<'a, V: Clone>(
    map: &'a OrdMap<String, V>,
    token: &str,
    limit: usize,
    keep: impl Fn(&V) -> bool,
    max_scan: usize,
) -> Result<Page<'a, V>, CoreError> {
    let (items, next_from, previous_from);
    match decode(token)? {
        cursor @ (Cursor::Start | Cursor::After(_)) => {
            let from = match cursor {
                Cursor::After(k) => Bound::Excluded(k),
                _ => Bound::Unbounded,
            };
            let w = walk(map.range((from, Bound::Unbounded)), limit, &keep, max_scan);
            next_from = match (w.more, w.stopped_at, w.items.last()) {
                (true, Some(stop), _) => Some(stop),
                (true, None, Some((last, _))) => Some(*last),
                _ => None,
            };
            previous_from = w.items.first().and_then(|(first, _)| {
                any_within(map.range::<_, String>(..*first).rev(), &keep, max_scan)
                    .then_some(*first)
            });
            items = w.items;
        }
        Cursor::Before(k) => {
            let w = walk(map.range::<_, String>(..k).rev(), limit, &keep, max_scan);
            previous_from = match (w.more, w.stopped_at, w.items.last()) {
                (true, Some(stop), _) => Some(stop),
                (true, None, Some((first, _))) => Some(*first),
                _ => None,
            };
            let mut walked = w.items;
            walked.reverse();
            next_from = walked.last().and_then(|(last, _)| {
                let after = map.range::<_, String>((Bound::Excluded(*last), Bound::Unbounded));
                any_within(after, &keep, max_scan).then_some(*last)
            });
            items = walked;
        }
    }
    Ok(Page {
        items,
        next_token: next_from.map_or_else(String::new, |k| encode('a', k)),
        previous_token: previous_from.map_or_else(String::new, |k| encode('b', k)),
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
    fn a_capped_scan_ends_the_page_early_and_tokens_still_reach_every_match() {
        let m = map(100);
        let only = |v: &usize| *v == 3 || *v == 57 || *v == 58 || *v == 99;
        let mut seen = Vec::new();
        let mut token = String::new();
        let mut pages = 0;
        loop {
            let p = paginate_scanning(&m, &token, 2, only, 10).unwrap();
            seen.extend(keys(&p));
            pages += 1;
            if p.next_token.is_empty() {
                break;
            }
            token = p.next_token;
        }
        assert_eq!(seen, ["k003", "k057", "k058", "k099"]);
        assert!(
            pages >= 10,
            "each page looked at 10 entries at most: {pages}"
        );
        // An empty page still carries the way on.
        let p = paginate_scanning(&m, "", 2, |v| *v == 99, 10).unwrap();
        assert!(p.items.is_empty() && !p.next_token.is_empty());
        // Backwards too.
        let end = encode('b', "k100");
        let mut back = Vec::new();
        let mut token = end;
        loop {
            let p = paginate_scanning(&m, &token, 2, only, 10).unwrap();
            let mut ks = keys(&p);
            ks.reverse();
            back.extend(ks);
            if p.previous_token.is_empty() {
                break;
            }
            token = p.previous_token;
        }
        assert_eq!(back, ["k099", "k058", "k057", "k003"]);
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
