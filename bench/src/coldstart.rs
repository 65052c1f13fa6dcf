//! Cold start: process start to the function's first poll of the Lambda Runtime API, served by a
//! minimal local stub, and the peak resident memory at that point.

use serde_json::{json, Value};
use std::process::Stdio;
use std::time::{Duration, Instant};
use tokio::io::AsyncReadExt;

/// Median and spread over `runs` starts of `binary`.
pub async fn measure(binary: &str, runs: usize) -> Value {
    let mut millis = Vec::with_capacity(runs);
    let mut rss_kb = Vec::with_capacity(runs);
    for _ in 0..runs {
        let (ms, kb) = once(binary).await;
        millis.push(ms);
        rss_kb.push(kb);
    }
    millis.sort_by(f64::total_cmp);
    rss_kb.sort_unstable();
    json!({
        "binary": binary,
        "runs": runs,
        "median_ms": millis[runs / 2],
        "min_ms": millis[0],
        "max_ms": millis[runs - 1],
        "peak_rss_kb": rss_kb[runs - 1],
        "size_bytes": std::fs::metadata(binary).map(|m| m.len()).unwrap_or(0),
    })
}

async fn once(binary: &str) -> (f64, u64) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("stub");
    let api = listener.local_addr().expect("address").to_string();
    let started = Instant::now();
    let mut child = tokio::process::Command::new(binary)
        .env("AWS_LAMBDA_RUNTIME_API", &api)
        .env("AWS_LAMBDA_FUNCTION_NAME", "bench")
        .env("AWS_LAMBDA_FUNCTION_MEMORY_SIZE", "256")
        .env("AWS_LAMBDA_FUNCTION_VERSION", "$LATEST")
        .env("AWS_LAMBDA_LOG_STREAM_NAME", "bench")
        .env("AWS_LAMBDA_LOG_GROUP_NAME", "bench")
        .env("AWS_REGION", "us-east-1")
        .env("AWS_ACCESS_KEY_ID", "bench")
        .env("AWS_SECRET_ACCESS_KEY", "bench")
        .env("IDEMPOTENCY_TABLE", "bench-idem")
        .env("PAYMENTS_TABLE", "bench-pay")
        .env("STRIPE_API_KEY", "sk_test_bench")
        .env("STRIPE_WEBHOOK_SECRETS", "whsec_bench")
        .env("WEBHOOK_QUEUE_URL", "http://127.0.0.1:1/000000000000/bench")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .expect("start the function");
    let pid = child.id().expect("pid");
    let accepted = tokio::time::timeout(Duration::from_secs(10), async {
        loop {
            let (mut socket, _) = listener.accept().await.expect("accept");
            let mut buffer = vec![0u8; 4096];
            let n = socket.read(&mut buffer).await.unwrap_or(0);
            let head = String::from_utf8_lossy(&buffer[..n]);
            if head.starts_with("GET /2018-06-01/runtime/invocation/next") {
                return (started.elapsed(), socket);
            }
        }
    })
    .await;
    let (elapsed, _socket) = accepted.expect("the function polled the Runtime API");
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let hwm = status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap_or(0);
    let _ = child.kill().await;
    (elapsed.as_secs_f64() * 1000.0, hwm)
}
