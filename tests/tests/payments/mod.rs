//! POST /payments and the orders API through the real handlers, fed API Gateway v2 events,
//! against DynamoDB Local and the fake PSP over HTTP.

mod bad_input;
mod charge;
mod checkout;
mod checkout_2c2p;
mod checkout_paypal;
mod checkout_square;
mod concurrency;
mod limits;
mod operations;
mod orders;
mod stale_reads;
mod store_down;

use payonce_tests::stack::PaymentStack;

/// Posts `result` (`complete` or `fail`) on the fake PSP's authentication page at `url`, as the
/// customer's browser would; its status and `Location`.
async fn authenticate(url: &str, result: &str) -> (u16, Option<String>) {
    let reply = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap()
        .post(url)
        .form(&[("result", result)])
        .send()
        .await
        .expect("the authentication page answers");
    let location = reply
        .headers()
        .get("location")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    (reply.status().as_u16(), location)
}

/// The payment state of alice's order `order`, as the API shows it.
async fn order_state(stack: &PaymentStack, order: &str) -> String {
    let reply = stack.get_order("alice", order).await;
    assert_eq!(reply.status, 200, "{}", reply.body);
    reply.json["payment_state"].as_str().unwrap().to_owned()
}
