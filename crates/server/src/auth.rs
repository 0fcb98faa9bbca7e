//! API keys: `Authorization: Bearer KEY` on every route but `/health`.
//!
//! Only the SHA-256 digests of the keys are kept. A presented key is hashed
//! and compared with every digest in constant time (`subtle`), all of them
//! whatever the outcome, so neither the position of the first differing byte
//! nor which key matched shows in the timing; comparing fixed-length digests
//! also hides the keys' lengths. Keys are never logged, echoed or printed by
//! `Debug`.

use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

use crate::error::ServerError;

/// The accepted API keys; empty means no authentication.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct ApiKeys {
    digests: Vec<[u8; 32]>,
}

impl std::fmt::Debug for ApiKeys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "ApiKeys({} key(s), redacted)", self.digests.len())
    }
}

fn digest(key: &[u8]) -> [u8; 32] {
    Sha256::digest(key).into()
}

impl ApiKeys {
    /// No authentication.
    pub fn none() -> Self {
        Self::default()
    }

    /// Accept any of `keys`. A key must be non-empty and consist of visible
    /// ASCII characters (as an HTTP header value can carry it); the error
    /// names the key's position, never its value.
    pub fn new<I, S>(keys: I) -> Result<Self, ServerError>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        let mut digests = Vec::new();
        for (i, key) in keys.into_iter().enumerate() {
            let key = key.as_ref();
            if key.is_empty() || !key.bytes().all(|b| b.is_ascii_graphic()) {
                return Err(ServerError::Config(format!(
                    "API key #{} is empty or has characters other than visible ASCII",
                    i + 1
                )));
            }
            digests.push(digest(key.as_bytes()));
        }
        Ok(Self { digests })
    }

    /// Whether authentication is required.
    pub fn is_enabled(&self) -> bool {
        !self.digests.is_empty()
    }

    /// Number of keys.
    pub fn len(&self) -> usize {
        self.digests.len()
    }

    /// Whether there is no key.
    pub fn is_empty(&self) -> bool {
        self.digests.is_empty()
    }

    /// Whether `presented` is one of the keys (constant time in the keys).
    pub fn accepts(&self, presented: &[u8]) -> bool {
        let wanted = digest(presented);
        let mut any = subtle::Choice::from(0u8);
        for d in &self.digests {
            any |= d.ct_eq(&wanted);
        }
        bool::from(any)
    }
}

/// Why a request was refused; the message never contains the key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum AuthFailure {
    Missing,
    Malformed,
    Wrong,
}

/// Check an `Authorization` header value against `keys`.
pub(crate) fn check(keys: &ApiKeys, header: Option<&[u8]>) -> Result<(), AuthFailure> {
    if !keys.is_enabled() {
        return Ok(());
    }
    let Some(value) = header else {
        return Err(AuthFailure::Missing);
    };
    let Some(scheme_end) = value.iter().position(|&b| b == b' ') else {
        return Err(AuthFailure::Malformed);
    };
    let (scheme, rest) = value.split_at(scheme_end);
    if !scheme.eq_ignore_ascii_case(b"bearer") {
        return Err(AuthFailure::Malformed);
    }
    let token = rest.trim_ascii();
    if keys.accepts(token) {
        Ok(())
    } else {
        Err(AuthFailure::Wrong)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_only_listed_keys() {
        let keys = ApiKeys::new(["alpha-1", "beta-2"]).unwrap();
        assert!(keys.accepts(b"alpha-1"));
        assert!(keys.accepts(b"beta-2"));
        assert!(!keys.accepts(b"alpha-"));
        assert!(!keys.accepts(b"alpha-12"));
        assert!(!keys.accepts(b""));
        assert_eq!(check(&keys, Some(b"Bearer beta-2")), Ok(()));
        assert_eq!(check(&keys, Some(b"bearer  alpha-1 ")), Ok(()));
        assert_eq!(check(&keys, None), Err(AuthFailure::Missing));
        assert_eq!(check(&keys, Some(b"beta-2")), Err(AuthFailure::Malformed));
        assert_eq!(
            check(&keys, Some(b"Basic beta-2")),
            Err(AuthFailure::Malformed)
        );
        assert_eq!(check(&keys, Some(b"Bearer gamma")), Err(AuthFailure::Wrong));
        assert_eq!(check(&ApiKeys::none(), None), Ok(()));
    }

    #[test]
    fn debug_never_shows_a_key_and_bad_keys_are_refused() {
        let keys = ApiKeys::new(["s3cret-key"]).unwrap();
        let shown = format!("{keys:?}");
        assert!(!shown.contains("s3cret"), "{shown}");
        assert!(ApiKeys::new([""]).is_err());
        let err = ApiKeys::new(["ok", "has space"]).unwrap_err().to_string();
        assert!(err.contains("#2") && !err.contains("has space"), "{err}");
    }
}
