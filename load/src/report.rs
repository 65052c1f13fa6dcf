//! Percentiles, the markdown report and the latency-over-time plot (a small SVG of our own).

use crate::client::{Endpoint, Sample};
use std::collections::BTreeMap;
use std::fmt::Write;

/// Nearest-rank percentile `p` (0–1) of sorted `values`.
pub fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let rank = (p * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

/// One endpoint's numbers.
#[derive(Debug, Clone)]
pub struct EndpointStats {
    /// The route.
    pub endpoint: Endpoint,
    /// Requests sent.
    pub requests: usize,
    /// Requests answered per second over the load window.
    pub throughput: f64,
    /// Latency percentiles (ms) of answered requests: p50, p99, p99.9, max.
    pub p50: f64,
    /// p99.
    pub p99: f64,
    /// p99.9.
    pub p999: f64,
    /// Slowest.
    pub max: f64,
    /// Answer class → count.
    pub classes: BTreeMap<String, usize>,
}

/// The numbers per endpoint, over `window_s` seconds.
pub fn endpoint_stats(samples: &[Sample], window_s: f64) -> Vec<EndpointStats> {
    Endpoint::ALL
        .iter()
        .filter_map(|&endpoint| {
            let mine: Vec<&Sample> = samples.iter().filter(|s| s.endpoint == endpoint).collect();
            if mine.is_empty() {
                return None;
            }
            let mut latencies: Vec<f64> = mine.iter().filter_map(|s| s.latency_ms).collect();
            latencies.sort_by(f64::total_cmp);
            let mut classes = BTreeMap::new();
            for sample in &mine {
                *classes.entry(sample.class.clone()).or_insert(0) += 1;
            }
            let answered = mine
                .iter()
                .filter(|s| s.latency_ms.is_some() && s.class != "transport error")
                .count();
            Some(EndpointStats {
                endpoint,
                requests: mine.len(),
                throughput: answered as f64 / window_s,
                p50: percentile(&latencies, 0.5),
                p99: percentile(&latencies, 0.99),
                p999: percentile(&latencies, 0.999),
                max: latencies.last().copied().unwrap_or(f64::NAN),
                classes,
            })
        })
        .collect()
}

/// The per-endpoint markdown table.
pub fn endpoint_table(stats: &[EndpointStats]) -> String {
    let mut out = String::from(
        "| endpoint | requests | answered/s | p50 ms | p99 ms | p99.9 ms | max ms | answers (status + problem type) |\n|---|---|---|---|---|---|---|---|\n",
    );
    for s in stats {
        let classes: Vec<String> = s.classes.iter().map(|(c, n)| format!("{c}: {n}")).collect();
        let _ = writeln!(
            out,
            "| {} | {} | {:.1} | {:.1} | {:.1} | {:.1} | {:.1} | {} |",
            s.endpoint.route(),
            s.requests,
            s.throughput,
            s.p50,
            s.p99,
            s.p999,
            s.max,
            classes.join(", ")
        );
    }
    out
}

/// One line of the plot: (second, ms) points, colour, label.
type Line<'a> = (Vec<(usize, f64)>, &'a str, &'a str);

/// Latency over time: per second of due time, p50 and p99 of `POST /orders` and `POST /payments`,
/// on a log scale, as a self-contained SVG.
pub fn latency_svg(samples: &[Sample], title: &str) -> String {
    let (width, height) = (900.0, 420.0);
    let (left, right, top, bottom) = (60.0, 20.0, 40.0, 50.0);
    let series: Vec<(Endpoint, f64, &str, &str)> = vec![
        (Endpoint::CreateOrder, 0.5, "#1f77b4", "POST /orders p50"),
        (Endpoint::CreateOrder, 0.99, "#aec7e8", "POST /orders p99"),
        (Endpoint::Charge, 0.5, "#d62728", "POST /payments p50"),
        (Endpoint::Charge, 0.99, "#ff9896", "POST /payments p99"),
    ];
    let seconds = samples
        .iter()
        .map(|s| s.due_s.floor() as usize)
        .max()
        .unwrap_or(0)
        + 1;
    let mut lines: Vec<Line<'_>> = Vec::new();
    for (endpoint, p, colour, label) in &series {
        let mut buckets: Vec<Vec<f64>> = vec![Vec::new(); seconds];
        for s in samples.iter().filter(|s| s.endpoint == *endpoint) {
            if let Some(latency) = s.latency_ms {
                buckets[s.due_s.floor() as usize].push(latency);
            }
        }
        let points = buckets
            .iter_mut()
            .enumerate()
            .filter(|(_, b)| !b.is_empty())
            .map(|(second, b)| {
                b.sort_by(f64::total_cmp);
                (second, percentile(b, *p))
            })
            .collect();
        lines.push((points, colour, label));
    }
    let max_ms = lines
        .iter()
        .flat_map(|(points, _, _)| points.iter().map(|p| p.1))
        .fold(1.0_f64, f64::max);
    let (lo, hi) = (0.1_f64.log10(), (max_ms * 1.5).log10().ceil().max(1.0));
    let x = |second: f64| left + (width - left - right) * second / seconds.max(1) as f64;
    let y = |ms: f64| {
        let v = ms.max(0.1).log10();
        top + (height - top - bottom) * (1.0 - (v - lo) / (hi - lo))
    };
    let mut svg = format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{width}\" height=\"{height}\" font-family=\"sans-serif\" font-size=\"12\">\n<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n<text x=\"{left}\" y=\"22\" font-size=\"14\">{}</text>\n",
        escape(title)
    );
    let mut decade = lo.ceil() as i32;
    while f64::from(decade) <= hi {
        let ms = 10f64.powi(decade);
        let _ = writeln!(
            svg,
            "<line x1=\"{left}\" x2=\"{}\" y1=\"{y:.1}\" y2=\"{y:.1}\" stroke=\"#ddd\"/><text x=\"{}\" y=\"{:.1}\" text-anchor=\"end\">{}</text>",
            width - right,
            left - 6.0,
            y(ms) + 4.0,
            if ms < 1.0 { format!("{ms}") } else { format!("{ms:.0}") },
            y = y(ms)
        );
        decade += 1;
    }
    let step = (seconds / 10).max(1);
    for second in (0..=seconds).step_by(step) {
        let _ = writeln!(
            svg,
            "<text x=\"{:.1}\" y=\"{}\" text-anchor=\"middle\">{second}</text>",
            x(second as f64),
            height - bottom + 18.0
        );
    }
    let _ = writeln!(
        svg,
        "<text x=\"{}\" y=\"{}\" text-anchor=\"middle\">seconds since start (by due time)</text><text transform=\"translate(16,{}) rotate(-90)\" text-anchor=\"middle\">latency ms (log)</text>",
        (left + width - right) / 2.0,
        height - 10.0,
        (top + height - bottom) / 2.0
    );
    let _ = writeln!(
        svg,
        "<rect x=\"{left}\" y=\"{top}\" width=\"{}\" height=\"{}\" fill=\"none\" stroke=\"#444\"/>",
        width - left - right,
        height - top - bottom
    );
    for (i, (points, colour, label)) in lines.iter().enumerate() {
        let path: Vec<String> = points
            .iter()
            .map(|(second, ms)| format!("{:.1},{:.1}", x(*second as f64 + 0.5), y(*ms)))
            .collect();
        let _ = writeln!(
            svg,
            "<polyline fill=\"none\" stroke=\"{colour}\" stroke-width=\"1.5\" points=\"{}\"/>",
            path.join(" ")
        );
        let lx = left + 10.0 + 190.0 * i as f64;
        let _ = writeln!(
            svg,
            "<line x1=\"{lx}\" x2=\"{}\" y1=\"{}\" y2=\"{}\" stroke=\"{colour}\" stroke-width=\"3\"/><text x=\"{}\" y=\"{}\">{label}</text>",
            lx + 20.0,
            top + 14.0,
            top + 14.0,
            lx + 24.0,
            top + 18.0
        );
    }
    svg.push_str("</svg>\n");
    svg
}

fn escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

#[cfg(test)]
mod tests {
    use super::percentile;

    #[test]
    fn percentiles_are_nearest_rank() {
        let values: Vec<f64> = (1..=1000).map(f64::from).collect();
        assert_eq!(percentile(&values, 0.5), 500.0);
        assert_eq!(percentile(&values, 0.99), 990.0);
        assert_eq!(percentile(&values, 0.999), 999.0);
        assert_eq!(percentile(&[7.0], 0.999), 7.0);
        assert!(percentile(&[], 0.5).is_nan());
    }
}
