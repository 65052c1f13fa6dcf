//! The fake's customer-facing authentication page (`/_fake/authenticate/<id>`), as HTML every face
//! that sends customers there shares: the form with *Complete* and *Fail*, and the page frame.
//! What a face says around it (unknown charge, not waiting, the redirect) is the face's own.

use crate::faces::form::parse_form;
use crate::ledger::{escape_html, ActionAttempt, Face, Intent, Ledger, PageAnswer, Status};

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

/// The page of a charge waiting for its customer, on a face that sends them back to the return
/// URL as given (Omise's `return_uri`, 2C2P's `frontendReturnUrl`): `GET` shows the form,
/// `POST result=complete|fail` answers the action once through the ledger and answers 303 to the
/// return URL. An unknown charge → 404; one not waiting (any more) → 409 and nothing changes; any
/// other form → 400. The face's own status words name the charge's state.
pub(crate) fn answer_page(
    face: &dyn Face,
    ledger: &mut Ledger,
    charge_id: &str,
    form: Option<&[u8]>,
    now_ms: i64,
) -> PageAnswer {
    let Some(&index) = ledger.by_id.get(charge_id) else {
        return unknown_page(charge_id);
    };
    let Some(form) = form else {
        let intent = &ledger.intents[index];
        if intent.status != Status::RequiresAction {
            return not_waiting(face, intent);
        }
        return PageAnswer::html(200, authentication_form(intent));
    };
    let completed = match form_result(form) {
        Ok(completed) => completed,
        Err(refused) => return refused,
    };
    match ledger.complete_action(face, charge_id, completed, now_ms) {
        ActionAttempt::NoSuchCharge => unknown_page(charge_id),
        ActionAttempt::NotWaiting(index) => not_waiting(face, &ledger.intents[index]),
        ActionAttempt::Done { index, events } => {
            let intent = &ledger.intents[index];
            let outcome = format!(
                "Authentication {}: the charge is now {}.",
                if completed { "completed" } else { "failed" },
                face.charge_status(intent)
            );
            match &intent.return_url {
                Some(return_url) => PageAnswer {
                    status: 303,
                    location: Some(return_url.clone()),
                    html: page(
                        "Redirecting",
                        &format!(
                            "{outcome} <a href=\"{}\">Continue</a>",
                            escape_html(return_url)
                        ),
                    ),
                    events,
                },
                // Every charge that waits on these faces has a return URL; kept total.
                None => PageAnswer {
                    status: 200,
                    location: None,
                    html: page("Done", &outcome),
                    events,
                },
            }
        }
    }
}

/// What the page's form posted: `result=complete` (true) or `result=fail` (false); anything
/// else is answered 400 and changes nothing.
pub(crate) fn form_result(form: &[u8]) -> Result<bool, PageAnswer> {
    match parse_form(form).get("result").map(String::as_str) {
        Some("complete") => Ok(true),
        Some("fail") => Ok(false),
        _ => Err(PageAnswer::html(
            400,
            page(
                "Bad request",
                "The form must post result=complete or result=fail.",
            ),
        )),
    }
}

/// The authentication page's answer for an unknown charge.
fn unknown_page(charge_id: &str) -> PageAnswer {
    PageAnswer::html(
        404,
        page(
            "Unknown charge",
            &format!("charge {} was not found.", escape_html(charge_id)),
        ),
    )
}

/// 409: the charge is no longer waiting for an authentication; nothing changed.
fn not_waiting(face: &dyn Face, intent: &Intent) -> PageAnswer {
    PageAnswer::html(
        409,
        page(
            "Nothing to authenticate",
            &format!(
                "The charge <code>{}</code> is {}: it is not waiting for authentication.",
                escape_html(&intent.id),
                face.charge_status(intent)
            ),
        ),
    )
}
