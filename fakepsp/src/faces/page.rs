//! The fake's customer-facing authentication page (`/_fake/authenticate/<id>`), as HTML every face
//! that sends customers there shares: the form with *Complete* and *Fail*, and the page frame.
//! What a face says around it (unknown charge, not waiting, the redirect) is the face's own.

use crate::ledger::{escape_html, Intent};

/// Where the fake serves a charge's authentication page, under its base URL.
pub(crate) const AUTHENTICATE_PATH: &str = "/_fake/authenticate";

/// The authentication page of a charge waiting for it: amount, currency and two
/// buttons, each a form posting `result` back to the page's own URL.
pub(crate) fn authentication_form(intent: &Intent) -> String {
    let action = format!("{AUTHENTICATE_PATH}/{}", escape_html(&intent.id));
    let body = format!(
        "<p>Authenticate the payment of <strong>{amount} {currency}</strong> \
         (<code>{id}</code>).</p>\n\
         <form method=\"post\" action=\"{action}\">\
         <input type=\"hidden\" name=\"result\" value=\"complete\">\
         <button type=\"submit\">Complete</button></form>\n\
         <form method=\"post\" action=\"{action}\">\
         <input type=\"hidden\" name=\"result\" value=\"fail\">\
         <button type=\"submit\">Fail</button></form>",
        amount = intent.amount,
        currency = escape_html(&intent.currency.to_ascii_uppercase()),
        id = escape_html(&intent.id),
    );
    page("3-D Secure authentication (fake PSP)", &body)
}

/// A minimal HTML page; `body` is HTML already.
pub(crate) fn page(title: &str, body: &str) -> String {
    format!(
        "<!doctype html>\n<html><head><meta charset=\"utf-8\"><title>{title}</title></head>\n\
         <body><h1>{title}</h1>\n{body}\n</body></html>\n"
    )
}
