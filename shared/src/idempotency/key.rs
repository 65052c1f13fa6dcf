//! The client-chosen idempotency key and the record key it is stored under.

use std::fmt;

/// Longest key a client may send, in characters (Stripe's limit, and ours).
pub const MAX_KEY_LEN: usize = 255;

/// A validated `Idempotency-Key`: 1 to 255 characters, each printable ASCII (0x21–0x7E).
///
/// Constructed only through [`IdempotencyKey::parse`], so holding one proves it is valid.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct IdempotencyKey(String);

/// Why a candidate idempotency key was refused; each variant names the rule it broke.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum InvalidKey {
    /// The key is the empty string.
    #[error("the idempotency key is empty; it must be 1 to {MAX_KEY_LEN} characters")]
    Empty,
    /// The key is longer than [`MAX_KEY_LEN`].
    #[error("the idempotency key is {len} characters long; at most {MAX_KEY_LEN} are allowed")]
    TooLong {
        /// Length of the refused key, in characters.
        len: usize,
    },
    /// The key holds a character outside 0x21–0x7E (space, control or non-ASCII).
    #[error(
        "the idempotency key has a character outside printable ASCII (0x21-0x7E) at position {position}"
    )]
    BadCharacter {
        /// Zero-based character position of the first offending character.
        position: usize,
    },
}

impl IdempotencyKey {
    /// Validates `raw` as an idempotency key: 1 to 255 printable ASCII characters.
    ///
    /// ```
    /// use payonce::idempotency::IdempotencyKey;
    /// assert!(IdempotencyKey::parse("6f1c0d9e-3b5a-4f0e-9d61-2b7c8a1e4f55").is_ok());
    /// assert!(IdempotencyKey::parse("").is_err());
    /// assert!(IdempotencyKey::parse("has space").is_err());
    /// assert!(IdempotencyKey::parse(&"k".repeat(256)).is_err());
    /// ```
    pub fn parse(raw: &str) -> Result<Self, InvalidKey> {
        if raw.is_empty() {
            return Err(InvalidKey::Empty);
        }
        let len = raw.chars().count();
        if len > MAX_KEY_LEN {
            return Err(InvalidKey::TooLong { len });
        }
        if let Some(position) = raw.chars().position(|c| !('\x21'..='\x7e').contains(&c)) {
            return Err(InvalidKey::BadCharacter { position });
        }
        Ok(Self(raw.to_owned()))
    }

    /// The key as the client sent it.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for IdempotencyKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// Where an idempotency record lives: `<scope>#<user>#<key>`.
///
/// The scope is the operation's stable name (e.g. `payments.create`), never a function or
/// module name, so a refactor cannot orphan stored records. The user comes from the verified
/// identity, so the same key sent by two users names two independent records.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct RecordKey(String);

impl RecordKey {
    /// Builds the record key for `key`, sent by `user`, for the operation `scope`.
    ///
    /// `scope` and `user` must not contain `#`; the key may (it is last, so the
    /// composite stays unambiguous).
    pub fn new(scope: &str, user: &str, key: &IdempotencyKey) -> Self {
        debug_assert!(!scope.contains('#') && !user.contains('#'));
        Self(format!("{scope}#{user}#{}", key.as_str()))
    }

    /// Wraps an already composed record key, as read back from the store.
    pub fn from_stored(raw: String) -> Self {
        Self(raw)
    }

    /// The composite key, as stored in the partition key attribute.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for RecordKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_the_full_printable_range_and_the_length_limit() {
        let every_printable: String = ('\x21'..='\x7e').collect();
        assert!(IdempotencyKey::parse(&every_printable).is_ok());
        assert!(IdempotencyKey::parse(&"k".repeat(255)).is_ok());
        assert!(IdempotencyKey::parse("a").is_ok());
    }

    #[test]
    fn each_refusal_names_the_rule_broken() {
        assert_eq!(IdempotencyKey::parse(""), Err(InvalidKey::Empty));
        assert_eq!(
            IdempotencyKey::parse(&"k".repeat(256)),
            Err(InvalidKey::TooLong { len: 256 })
        );
        assert_eq!(
            IdempotencyKey::parse("ab c"),
            Err(InvalidKey::BadCharacter { position: 2 })
        );
        assert_eq!(
            IdempotencyKey::parse("caf\u{e9}"),
            Err(InvalidKey::BadCharacter { position: 3 })
        );
        assert_eq!(
            IdempotencyKey::parse("tab\there"),
            Err(InvalidKey::BadCharacter { position: 3 })
        );
        assert_eq!(
            IdempotencyKey::parse("del\x7f"),
            Err(InvalidKey::BadCharacter { position: 3 })
        );
        assert!(InvalidKey::TooLong { len: 256 }.to_string().contains("255"));
    }

    #[test]
    fn length_counts_characters_not_bytes() {
        // 200 two-byte characters: 400 bytes but 200 characters; refused for the character, not the length.
        let key = "\u{e9}".repeat(200);
        assert_eq!(
            IdempotencyKey::parse(&key),
            Err(InvalidKey::BadCharacter { position: 0 })
        );
    }

    #[test]
    fn record_key_scopes_by_operation_and_user() {
        let key = IdempotencyKey::parse("k#1").unwrap();
        assert_eq!(
            RecordKey::new("payments.create", "u1", &key).as_str(),
            "payments.create#u1#k#1"
        );
        assert_ne!(
            RecordKey::new("payments.create", "u1", &key),
            RecordKey::new("payments.create", "u2", &key)
        );
    }
}
