//! Heap allocations of one admission review: the 8 KB review the load bench sends, answered
//! by `admission::review` (parse, decide, patch, reply), counted by dhat.
//!
//! Allocations cost more in the server than in a loop: its tokio workers allocate and free
//! on different threads, and every allocation competes with TLS and hyper for the caches.
//!
//! Run: `cargo bench --bench review_allocations`.

#[path = "support/review.rs"]
mod review;

#[global_allocator]
static ALLOC: dhat::Alloc = dhat::Alloc;

fn main() {
    let body = review::review_body();
    let sidecars = review::sidecars();
    let settings = sidecar_injector::injection::InjectionSettings::default();
    let answer = || sidecar_injector::serve::review(&body, &sidecars, &settings).unwrap();
    // The first review fills what is built once (lazy statics), not per request.
    let first = answer();
    assert_eq!(
        first.result,
        sidecar_injector::admission::AdmissionResult::Injected,
        "the bench must count a real injection"
    );
    let _profiler = match std::env::var_os("DHAT_FILE") {
        Some(file) => dhat::Profiler::builder().file_name(file).build(),
        None => dhat::Profiler::builder().testing().build(),
    };
    const REVIEWS: u64 = 100;
    let before = dhat::HeapStats::get();
    for _ in 0..REVIEWS {
        std::hint::black_box(answer());
    }
    let after = dhat::HeapStats::get();
    let allocations = (after.total_blocks - before.total_blocks) as f64 / REVIEWS as f64;
    let bytes = (after.total_bytes - before.total_bytes) as f64 / REVIEWS as f64;
    println!(
        "review of {} bytes: {allocations:.1} allocations, {bytes:.0} bytes allocated per review (reply {} bytes)",
        body.len(),
        first.body.len()
    );
}
