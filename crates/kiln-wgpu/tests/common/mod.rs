//! What the wgpu backend's tests share.

use kiln_wgpu::{WgpuBackend, WgpuOptions};

/// The best adapter with `options`, or `None` when there is none (a failure when
/// `KILN_REQUIRE` names wgpu).
pub fn open(options: WgpuOptions) -> Option<WgpuBackend> {
    match WgpuBackend::with_options(options) {
        Ok(b) => Some(b),
        Err(e) => {
            let required = std::env::var("KILN_REQUIRE").unwrap_or_default();
            assert!(!required.contains("wgpu"), "wgpu is required: {e}");
            None
        }
    }
}
