//! The stamp a derived index carries to say which state of sled it reflects: the collection's
//! incarnation and generation. An index whose stamp differs from sled's lags and is rebuilt.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

/// Incarnation and generation of the sled state an index was derived from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct IndexStamp {
    pub incarnation: u64,
    pub generation: u64,
}

impl fmt::Display for IndexStamp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "orkeon:{}:{}", self.incarnation, self.generation)
    }
}

impl FromStr for IndexStamp {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let mut parts = s.split(':');
        match (parts.next(), parts.next(), parts.next(), parts.next()) {
            (Some("orkeon"), Some(incarnation), Some(generation), None) => Ok(Self {
                incarnation: incarnation
                    .parse()
                    .map_err(|e| format!("bad incarnation in stamp '{s}': {e}"))?,
                generation: generation
                    .parse()
                    .map_err(|e| format!("bad generation in stamp '{s}': {e}"))?,
            }),
            _ => Err(format!("'{s}' is not an index stamp")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stamp_round_trips_through_text() {
        let stamp = IndexStamp {
            incarnation: u64::MAX,
            generation: 12,
        };
        assert_eq!(stamp.to_string().parse::<IndexStamp>().unwrap(), stamp);
        assert!("orkeon:1".parse::<IndexStamp>().is_err());
        assert!("orkeon:x:1".parse::<IndexStamp>().is_err());
        assert!("other:1:2".parse::<IndexStamp>().is_err());
    }
}
