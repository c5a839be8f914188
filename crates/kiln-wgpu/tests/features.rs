//! Features the adapter lacks (or the backend was told not to use) are typed errors before
//! anything is compiled, and the backend keeps working afterwards.

use kiln_backend::{Backend, BackendError, BackendKind, LaunchArg};
use kiln_ir::*;
use kiln_wgpu::{WgpuBackend, WgpuOptions};

fn open(options: WgpuOptions) -> Option<WgpuBackend> {
    match WgpuBackend::with_options(options) {
        Ok(b) => Some(b),
        Err(e) => {
            let required = std::env::var("KILN_REQUIRE").unwrap_or_default();
            assert!(!required.contains("wgpu"), "wgpu is required: {e}");
            None
        }
    }
}

fn doubling<T: Numeric>(name: &str) -> Kernel {
    Kernel::build(name, |k| {
        let x = k.buffer::<T>("x", Access::ReadWrite);
        let i = global_id(Axis::X);
        if_then(i.lt(x.len()), || x.store(i, x.load(i) + x.load(i)));
    })
    .unwrap()
}

#[test]
fn f64_and_i64_without_their_features_are_typed_errors() {
    let Some(backend) = open(WgpuOptions::portable()) else {
        return;
    };
    assert!(!backend.info().features.f64);
    for (kernel, feature) in [
        (doubling::<f64>("double_f64"), "SHADER_F64"),
        (doubling::<i64>("double_i64"), "SHADER_INT64"),
    ] {
        match backend.compile(&kernel) {
            Err(BackendError::Unsupported {
                backend: BackendKind::Wgpu,
                feature: f,
            }) => assert!(f.contains(feature) && f.contains(&kernel.name), "{f}"),
            Err(e) => panic!("expected Unsupported naming {feature}, got {e}"),
            Ok(_) => panic!("`{}` compiled without {feature}", kernel.name),
        }
    }
    let mut xs = vec![1.5f32, -2.0, 3.25];
    backend
        .compile(&doubling::<f32>("double_f32"))
        .unwrap()
        .launch(
            &kiln_backend::Grid::linear(1, 4),
            &mut [LaunchArg::read_write(&mut xs)],
        )
        .unwrap();
    assert_eq!(xs, vec![3.0, -4.0, 6.5], "the backend keeps working");
}

#[test]
fn f64_runs_when_the_adapter_has_it() {
    let Some(backend) = open(WgpuOptions::default()) else {
        return;
    };
    let kernel = doubling::<f64>("double_f64");
    let mut xs = vec![0.1f64, -1e300, 7.0];
    let want: Vec<f64> = xs.iter().map(|x| x + x).collect();
    match backend.compile(&kernel) {
        Ok(k) => {
            assert!(backend.info().features.f64);
            k.launch(
                &kiln_backend::Grid::linear(1, 4),
                &mut [LaunchArg::read_write(&mut xs)],
            )
            .unwrap();
            assert_eq!(xs, want);
        }
        Err(BackendError::Unsupported { feature, .. }) => {
            assert!(!backend.info().features.f64 && feature.contains("SHADER_F64"))
        }
        Err(e) => panic!("{e}"),
    }
}
