//! Strict base64 (RFC 4648), for PSP signature schemes: Omise's webhook secret (standard
//! alphabet, §4) and 2C2P's JWS segments (URL-safe alphabet, §5, unpadded as RFC 7515 requires).
//!
//! Strict means one text per byte string: characters outside the alphabet, whitespace,
//! misplaced or wrong padding, and non-zero unused trailing bits are all refused (lenient
//! decoders, Python's `urlsafe_b64decode` for one, silently drop bad characters and would read
//! `***` as an empty signature). The `base64` crate's standard engines are this strict.

use base64::engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD};
use base64::Engine;

/// Which alphabet and padding rule a text follows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Alphabet {
    /// `A–Z a–z 0–9 + /`, padded with `=` to a multiple of four characters (RFC 4648 §4).
    Standard,
    /// `A–Z a–z 0–9 - _`, no padding at all (RFC 4648 §5 as RFC 7515 §2 uses it).
    UrlSafeNoPad,
}

impl Alphabet {
    fn engine(self) -> &'static base64::engine::GeneralPurpose {
        match self {
            Self::Standard => &STANDARD,
            Self::UrlSafeNoPad => &URL_SAFE_NO_PAD,
        }
    }
}

/// The bytes `text` encodes in `alphabet`, or `None` if it is not the one canonical text.
pub fn decode(text: &str, alphabet: Alphabet) -> Option<Vec<u8>> {
    alphabet.engine().decode(text).ok()
}

/// The canonical text of `bytes` in `alphabet`.
pub fn encode(bytes: &[u8], alphabet: Alphabet) -> String {
    alphabet.engine().encode(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// RFC 4648 §10.
    #[test]
    fn rfc_4648_vectors() {
        let cases = [
            ("", ""),
            ("f", "Zg=="),
            ("fo", "Zm8="),
            ("foo", "Zm9v"),
            ("foob", "Zm9vYg=="),
            ("fooba", "Zm9vYmE="),
            ("foobar", "Zm9vYmFy"),
        ];
        for (plain, encoded) in cases {
            assert_eq!(encode(plain.as_bytes(), Alphabet::Standard), encoded);
            assert_eq!(
                decode(encoded, Alphabet::Standard).as_deref(),
                Some(plain.as_bytes())
            );
            let unpadded = encoded.trim_end_matches('=');
            assert_eq!(encode(plain.as_bytes(), Alphabet::UrlSafeNoPad), unpadded);
            assert_eq!(
                decode(unpadded, Alphabet::UrlSafeNoPad).as_deref(),
                Some(plain.as_bytes())
            );
        }
    }

    #[test]
    fn every_length_and_byte_round_trips() {
        let bytes: Vec<u8> = (0..=255).collect();
        for len in 0..bytes.len() {
            for alphabet in [Alphabet::Standard, Alphabet::UrlSafeNoPad] {
                let text = encode(&bytes[..len], alphabet);
                assert_eq!(decode(&text, alphabet).as_deref(), Some(&bytes[..len]));
            }
        }
        assert_eq!(encode(&[0xfb, 0xff], Alphabet::Standard), "+/8=");
        assert_eq!(encode(&[0xfb, 0xff], Alphabet::UrlSafeNoPad), "-_8");
    }

    #[test]
    fn non_canonical_texts_are_refused() {
        for text in [
            "Zg", "Zg=", "Zg===", "Z===", "Zm9v=", "Zh==", "Zm9=", "Zm 9v", "Zm9v\n", "-_8=",
            "=Zm9", "Zm=v", "*",
        ] {
            assert_eq!(decode(text, Alphabet::Standard), None, "{text:?}");
        }
        for text in [
            "***", "Zg==", "Zm8=", "+/8", "Z", "Zh", "Zm9", "Zm9vY", " Zm9v", "Zm9v.", "Zm9%",
        ] {
            assert_eq!(decode(text, Alphabet::UrlSafeNoPad), None, "{text:?}");
        }
    }
}
