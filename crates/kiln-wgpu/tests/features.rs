//! Features the adapter lacks (or the backend was told not to use) are typed errors before
//! anything is compiled, and the backend keeps working afterwards.

use kiln_backend::{Backend, BackendError, BackendKind, LaunchArg};
use kiln_ir::*;
mod common;
use common::open;

use kiln_wgpu::{WgpuBackend, WgpuOptions};

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

/// Each work item's `subgroup_size` and lane, launched as one group of 64.
fn subgroup_shape(backend: &WgpuBackend) -> Vec<u32> {
    let kernel = Kernel::build("subgroup_shape", |k| {
        let out = k.buffer::<u32>("out", Access::Write);
        let i = global_id(Axis::X);
        out.store(i * 2u32, builtin(Builtin::SubgroupSize));
        out.store(i * 2u32 + 1u32, builtin(Builtin::SubgroupLane));
    })
    .unwrap();
    let mut out = vec![0u32; 128];
    backend
        .compile(&kernel)
        .unwrap()
        .launch(
            &kiln_backend::Grid::linear(1, 64),
            &mut [LaunchArg::read_write(&mut out)],
        )
        .unwrap();
    out
}

#[test]
fn kernels_use_the_adapters_subgroups_when_it_has_them_and_one_lane_otherwise() {
    let (Some(full), Some(portable)) =
        (open(WgpuOptions::default()), open(WgpuOptions::portable()))
    else {
        return;
    };
    let instance =
        wgpu::Instance::new(wgpu::InstanceDescriptor::new_without_display_handle_from_env());
    let adapters = pollster::block_on(instance.enumerate_adapters(wgpu::Backends::all()));
    let adapter = adapters
        .iter()
        .find(|a| {
            let info = a.get_info();
            full.info().name == format!("{} ({})", info.name, kiln_wgpu::api_name(info.backend))
        })
        .expect("the backend's adapter is among wgpu's");
    let has = adapter
        .features()
        .contains(wgpu::Features::SUBGROUP | wgpu::Features::SUBGROUP_BARRIER);
    let size = if has {
        adapter.get_info().subgroup_max_size
    } else {
        1
    };
    assert_eq!(full.info().features.subgroups, has);
    assert_eq!(full.info().subgroup_size, size);
    assert!(!portable.info().features.subgroups);
    assert_eq!(portable.info().subgroup_size, 1);
    for (backend, size) in [(&full, size), (&portable, 1)] {
        let out = subgroup_shape(backend);
        for i in 0..64u32 {
            let got = (out[i as usize * 2], out[i as usize * 2 + 1]);
            assert_eq!(got, (size, i % size), "work item {i}");
        }
    }
}

#[test]
fn a_device_copy_into_a_larger_buffer_keeps_the_bytes_after_it() {
    let Some(backend) = open(WgpuOptions::default()) else {
        return;
    };
    let src = backend.alloc(7).unwrap();
    let dst = backend.alloc(10).unwrap();
    backend.upload(&*src, &[1, 2, 3, 4, 5, 6, 7]).unwrap();
    backend.upload(&*dst, &[90; 10]).unwrap();
    backend.copy(&*src, &*dst, 7).unwrap();
    let mut out = [0u8; 10];
    backend.download(&*dst, &mut out).unwrap();
    assert_eq!(out, [1, 2, 3, 4, 5, 6, 7, 90, 90, 90]);
    backend.copy(&*src, &*dst, 4).unwrap();
    backend.upload(&*src, &[0; 7]).unwrap();
    backend.copy(&*src, &*dst, 2).unwrap();
    backend.download(&*dst, &mut out).unwrap();
    assert_eq!(out, [0, 0, 3, 4, 5, 6, 7, 90, 90, 90]);
    match backend.copy(&*src, &*dst, 8) {
        Err(BackendError::InvalidLaunch { reason, .. }) => {
            assert!(reason.contains("source holds 7 bytes"), "{reason}")
        }
        r => panic!("expected InvalidLaunch, got {r:?}"),
    }
}
