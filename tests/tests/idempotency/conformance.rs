//! The store conformance suite, run on the embedded store and on DynamoDB Local through the
//! export anyone writing another backend uses (`payonce::testkit`, feature `testkit`).

payonce::store_conformance_suite!(embedded, payonce_tests::memory_harness());
payonce::store_conformance_suite!(dynamodb, payonce_tests::dynamo_harness().await);
// A table laid out by another tool: every attribute the layer reads or conditions on renamed.
payonce::store_conformance_suite!(
    dynamodb_powertools_layout,
    payonce_tests::dynamo_harness_powertools_layout().await
);

/// The one-call form a backend's author may prefer runs the same cases.
#[tokio::test]
async fn the_whole_suite_also_runs_in_one_call() {
    payonce::testkit::run_store_conformance(|| async { payonce_tests::memory_harness() }).await;
}
