//! Serde helpers: `SystemTime` as RFC 3339 UTC text, the format of project-lock `expires_at`.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Deserializer, Serializer};
use time::format_description::well_known::Rfc3339;
use time::OffsetDateTime;

/// Formats a time as RFC 3339 UTC with whole seconds.
pub fn format(t: SystemTime) -> String {
    let secs = match t.duration_since(UNIX_EPOCH) {
        Ok(d) => d.as_secs() as i64,
        Err(e) => -(e.duration().as_secs() as i64),
    };
    OffsetDateTime::from_unix_timestamp(secs)
        .ok()
        .and_then(|d| d.format(&Rfc3339).ok())
        .unwrap_or_else(|| secs.to_string())
}

/// Parses RFC 3339 text.
pub fn parse(s: &str) -> Result<SystemTime, String> {
    let d = OffsetDateTime::parse(s, &Rfc3339).map_err(|e| format!("{s:?}: {e}"))?;
    let nanos = d.unix_timestamp_nanos();
    if nanos >= 0 {
        Ok(UNIX_EPOCH + Duration::from_nanos(nanos as u64))
    } else {
        Ok(UNIX_EPOCH - Duration::from_nanos(nanos.unsigned_abs() as u64))
    }
}

pub fn serialize<S: Serializer>(t: &SystemTime, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(&format(*t))
}

pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<SystemTime, D::Error> {
    let text = String::deserialize(d)?;
    parse(&text).map_err(serde::de::Error::custom)
}

/// The same for `Option<SystemTime>`.
pub mod option {
    use super::*;

    pub fn serialize<S: Serializer>(t: &Option<SystemTime>, s: S) -> Result<S::Ok, S::Error> {
        match t {
            Some(t) => super::serialize(t, s),
            None => s.serialize_none(),
        }
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<SystemTime>, D::Error> {
        let text = Option::<String>::deserialize(d)?;
        text.map(|t| parse(&t).map_err(serde::de::Error::custom))
            .transpose()
    }
}
