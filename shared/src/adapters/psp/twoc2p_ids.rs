//! 2C2P's `invoiceNo` for our payments, and back.
//!
//! 2C2P knows a payment only by the merchant's `invoiceNo` ("AN 50": alphanumeric, at most 50
//! characters, unique per merchant; at most 20 for QR payments, developer.2c2p.com
//! api-payment-token-request-parameter). It is also the idempotency key of the charge (a second
//! payment token for the same invoice is refused with 9015) and the key of Payment Inquiry.
//!
//! Our payment ids are `pay_` followed by a v4 UUID as 32 lowercase hex digits. The invoice
//! number is those 32 digits: alphanumeric, within the 50-character limit, and reversible, so
//! a notification leads back to the payment by its primary key (never through an index). A
//! reversible id of at most 20 characters (what 2C2P's QR methods allow) cannot exist: even base62 carries at most
//! 119 bits in 20 characters, and a v4 UUID has 122 random bits. The cost is that 2C2P's QR
//! methods (20-character limit) cannot be used, which payonce (cards only) does not.

/// The prefix of our payment ids.
const PAYMENT_PREFIX: &str = "pay_";

/// The length of the hex part of our payment ids (a UUID, `simple` form).
const HEX_LEN: usize = 32;

fn is_lower_hex_id(s: &str) -> bool {
    s.len() == HEX_LEN && s.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

/// The `invoiceNo` of `payment_id`: its 32 hex digits. `None` for an id not of our form
/// (`pay_` + 32 lowercase hex digits), which has no invoice number.
pub fn invoice_no_for(payment_id: &str) -> Option<String> {
    payment_id
        .strip_prefix(PAYMENT_PREFIX)
        .filter(|hex| is_lower_hex_id(hex))
        .map(str::to_owned)
}

/// The payment id an `invoiceNo` stands for; `None` if the invoice number is not one payonce
/// makes (another system's, or altered), so an event about it is not ours.
pub fn payment_id_for_invoice(invoice_no: &str) -> Option<String> {
    is_lower_hex_id(invoice_no).then(|| format!("{PAYMENT_PREFIX}{invoice_no}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn our_payment_ids_map_to_invoice_numbers_and_back() {
        for _ in 0..100 {
            let payment_id = format!("pay_{}", crate::ids::new_uuid().simple());
            let invoice = invoice_no_for(&payment_id).unwrap();
            assert_eq!(invoice.len(), 32);
            assert!(invoice.bytes().all(|b| b.is_ascii_alphanumeric()));
            assert_eq!(payment_id_for_invoice(&invoice), Some(payment_id));
        }
        assert_eq!(
            invoice_no_for("pay_0123456789abcdef0123456789abcdef").as_deref(),
            Some("0123456789abcdef0123456789abcdef")
        );
    }

    #[test]
    fn other_ids_and_invoice_numbers_are_not_ours() {
        for payment_id in [
            "pay_1",
            "pay_0123456789ABCDEF0123456789ABCDEF",
            "pay_0123456789abcdef0123456789abcde",
            "pay_0123456789abcdef0123456789abcdef0",
            "0123456789abcdef0123456789abcdef",
            "pay_01234567-89ab-cdef-0123-456789abcdef",
            "",
        ] {
            assert_eq!(invoice_no_for(payment_id), None, "{payment_id}");
        }
        for invoice in [
            // 2C2P's documentation sample and the test vectors' invoice.
            "280520075921",
            "p1a2b3c4d5e6f7a8b9c0d1e2f3a4b5c6",
            "0123456789ABCDEF0123456789ABCDEF",
            "pay_0123456789abcdef0123456789abcdef",
            "0123456789abcdef0123456789abcdeg",
            "",
        ] {
            assert_eq!(payment_id_for_invoice(invoice), None, "{invoice}");
        }
    }
}
