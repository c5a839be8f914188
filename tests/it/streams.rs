//! Streams: launches and copies queued in order on a thread of each stream's own, events
//! between streams, blocking and `async` waits (under Tokio), failures that skip later work,
//! and host buffers. Every result is checked against plain Rust of the same arithmetic.

use crate::common::{ctx, every_backend};
use kiln::lang::{Index1D, View, ViewMut};
use kiln::{Context, Error, Grid, HostBuffer};

#[kiln::kernel]
fn mix_add(i: Index1D, x: ViewMut<u32>, k: u32) {
    x[i] = (x[i] ^ (x[i] >> 3u32)) + k;
}

fn mix_add_ref(x: u32, k: u32) -> u32 {
    (x ^ (x >> 3)) + k
}

#[kiln::kernel]
fn add_into(i: Index1D, a: View<u32>, out: ViewMut<u32>) {
    out[i] = out[i] + a[i];
}

/// Inputs below 2^24, so no sum here wraps.
fn input(n: usize, seed: u32) -> Vec<u32> {
    (0..n as u32)
        .map(|i| (i.wrapping_mul(2_654_435_761) ^ seed) >> 8)
        .collect()
}

fn host(ctx: &Context, xs: &[u32]) -> HostBuffer<u32> {
    ctx.host_buffer_from(xs).expect("a host buffer")
}

#[test]
fn chunks_flow_through_a_copy_stream_and_a_compute_stream_as_in_plain_rust() {
    every_backend(|| {
        let c = ctx();
        let (copies, compute) = (c.stream().unwrap(), c.stream().unwrap());
        // Odd chunk sizes, one of a single element; the last chunk is a slice of a buffer.
        let sizes = [4099usize, 1, 5003];
        let data: Vec<Vec<u32>> = sizes
            .iter()
            .enumerate()
            .map(|(i, &n)| input(n, i as u32 * 77))
            .collect();
        let whole = c.zeroed::<u32>(5003 + 6).unwrap();
        let device: Vec<kiln::Buffer<u32>> =
            sizes[..2].iter().map(|&n| c.zeroed(n).unwrap()).collect();
        let last = whole.slice(6..).unwrap();
        let mut results = Vec::new();
        for (i, xs) in data.iter().enumerate() {
            let target = if i < 2 {
                device[i].slice(..).unwrap()
            } else {
                last.clone()
            };
            let up = copies.upload(host(&c, xs), &target).unwrap();
            compute.wait_for(&copies.record()).unwrap();
            compute
                .launch(mix_add, xs.len(), (&target, i as u32 + 1))
                .unwrap();
            results.push((
                up,
                compute.download(&target, c.host_buffer(xs.len()).unwrap()),
            ));
        }
        for (i, (up, down)) in results.into_iter().enumerate() {
            let sent = up.wait().unwrap();
            assert_eq!(
                &sent[..],
                &data[i][..],
                "the upload gives its host buffer back"
            );
            let got = down.unwrap().wait().unwrap();
            let want: Vec<u32> = data[i]
                .iter()
                .map(|&x| mix_add_ref(x, i as u32 + 1))
                .collect();
            assert_eq!(&got[..], &want[..], "chunk {i} of {} elements", sizes[i]);
        }
        // The six elements before the slice were never written.
        assert_eq!(whole.slice(..6).unwrap().download().unwrap(), [0; 6]);
    });
}

#[test]
fn a_device_copy_and_a_launch_on_another_stream_are_ordered_by_an_event() {
    every_backend(|| {
        let c = ctx();
        let (a, b) = (c.stream().unwrap(), c.stream().unwrap());
        let n = 3001;
        let (xs, ys) = (input(n, 5), input(n, 9));
        let x = c.upload(&xs).unwrap();
        let y = c.upload(&ys).unwrap();
        let x_copy = c.zeroed::<u32>(n).unwrap();
        a.copy(&x, &x_copy).unwrap();
        a.launch(mix_add, n, (&x_copy, 3u32)).unwrap();
        let ready = a.record();
        b.wait_for(&ready).unwrap();
        b.launch(add_into, n, (&x_copy, &y)).unwrap();
        b.synchronize().unwrap();
        assert!(ready.is_done());
        let want: Vec<u32> = xs
            .iter()
            .zip(&ys)
            .map(|(&x, &y)| y + mix_add_ref(x, 3))
            .collect();
        assert_eq!(y.download().unwrap(), want);
        assert_eq!(
            x.download().unwrap(),
            xs,
            "the source of the copy is unchanged"
        );
    });
}

#[test]
fn waits_are_futures_that_tokio_awaits() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .build()
        .unwrap();
    every_backend(|| {
        let c = ctx();
        runtime.block_on(async {
            let (a, b) = (c.stream().unwrap(), c.stream().unwrap());
            let (xs, ys) = (input(777, 1), input(1025, 2));
            let (x, y) = (
                c.zeroed::<u32>(777).unwrap(),
                c.zeroed::<u32>(1025).unwrap(),
            );
            let up_x = a.upload(host(&c, &xs), &x).unwrap();
            let up_y = b.upload(host(&c, &ys), &y).unwrap();
            a.launch(mix_add, xs.len(), (&x, 10u32)).unwrap();
            b.launch(mix_add, ys.len(), (&y, 20u32)).unwrap();
            let (sent_x, sent_y) = tokio::join!(up_x, up_y);
            let (sent_x, sent_y) = (sent_x.unwrap(), sent_y.unwrap());
            let down_x = a.download(&x, sent_x).unwrap();
            let down_y = b.download(&y, sent_y).unwrap();
            let (fa, fb) = tokio::join!(a.finished(), b.finished());
            fa.unwrap();
            fb.unwrap();
            assert!(down_x.is_done() && down_y.is_done());
            let got_x = down_x.await.unwrap();
            let got_y = down_y.await.unwrap();
            let want_x: Vec<u32> = xs.iter().map(|&v| mix_add_ref(v, 10)).collect();
            let want_y: Vec<u32> = ys.iter().map(|&v| mix_add_ref(v, 20)).collect();
            assert_eq!(&got_x[..], &want_x[..]);
            assert_eq!(&got_y[..], &want_y[..]);
            // A task spawned on the runtime awaits an event of a stream it does not own.
            let event = a.record();
            tokio::spawn(async move { event.finished().await })
                .await
                .unwrap()
                .unwrap();
        });
    });
}

#[test]
fn a_failed_launch_fails_the_later_waits_and_skips_the_later_work() {
    every_backend(|| {
        let c = ctx();
        let s = c.stream().unwrap();
        let x = c.upload(&[1u32, 2, 3, 4]).unwrap();
        let y = c.zeroed::<u32>(4).unwrap();
        s.launch(mix_add, 4, (&x, 1u32)).unwrap();
        let before = s.record();
        // More work items per group than the device allows: the backend refuses the launch
        // when the stream runs it, not when it is queued.
        let too_many = c.device().max_group_size.checked_add(1).unwrap();
        s.launch_grid(mix_add, &Grid::linear(1, too_many), (&x, 1u32))
            .unwrap();
        s.copy(&x, &y).unwrap();
        let after = s.record();
        before.wait().unwrap();
        let failed = after.wait().unwrap_err();
        match &failed {
            Error::StreamFailed { op, source } => {
                assert!(op.contains("launch of `mix_add`"), "{failed}");
                assert!(
                    matches!(
                        **source,
                        Error::Backend(kiln::BackendError::InvalidLaunch { .. })
                    ),
                    "{failed}"
                );
            }
            other => panic!("expected StreamFailed, got {other:?}"),
        }
        assert!(s.synchronize().is_err(), "later waits report it too");
        // Work after the failure was skipped: the copy never ran.
        assert_eq!(y.download().unwrap(), [0; 4]);
        assert_eq!(x.download().unwrap(), [2, 3, 4, 5], "work before it ran");
        // A stream that waits for the failed work fails too; one that waits for earlier work
        // does not.
        let other = c.stream().unwrap();
        other.wait_for(&before).unwrap();
        other.synchronize().unwrap();
        other.wait_for(&after).unwrap();
        let e = other.synchronize().unwrap_err();
        assert!(matches!(e, Error::StreamFailed { .. }), "{e}");
        let down = s.download(&x, c.host_buffer(4).unwrap()).unwrap();
        assert!(matches!(down.wait(), Err(Error::StreamFailed { .. })));
    });
}

#[test]
fn what_a_stream_cannot_take_is_a_typed_error_when_it_is_queued() {
    every_backend(|| {
        let c = ctx();
        let s = c.stream().unwrap();
        let mut on_host = vec![1u32, 2, 3];
        let e = s.launch(mix_add, 3, (&mut on_host, 1u32)).unwrap_err();
        assert!(
            matches!(&e, Error::Unsupported { what, .. } if what.contains("host slice")
                && what.contains("stream")),
            "{e}"
        );
        let b = c.zeroed::<u32>(3).unwrap();
        let e = s.upload(host(&c, &[1, 2]), &b).err().unwrap();
        assert!(
            matches!(e, Error::LengthMismatch { left: 3, right: 2 }),
            "{e}"
        );
        let e = s.download(&b, c.host_buffer(4).unwrap()).err().unwrap();
        assert!(
            matches!(e, Error::LengthMismatch { left: 3, right: 4 }),
            "{e}"
        );
        let elsewhere = Context::with_backend(kiln::BackendKind::Cpu).unwrap();
        let foreign = elsewhere.zeroed::<u32>(3).unwrap();
        let e = s.copy(&foreign, &b).unwrap_err();
        assert!(matches!(e, Error::Unsupported { .. }), "{e}");
        // Nothing was queued by the refusals.
        s.synchronize().unwrap();
        assert_eq!(b.download().unwrap(), [0; 3]);
    });
}

#[test]
fn a_streams_work_starts_after_the_work_queued_on_the_context_before_it() {
    every_backend(|| {
        let c = ctx();
        let s = c.stream().unwrap();
        let n = 1 << 18;
        let xs = input(n, 11);
        let x = c.upload(&xs).unwrap();
        // Launches on device memory alone return once queued; the stream's download must
        // still see all four.
        for k in 0..4u32 {
            c.launch(mix_add, n, (&x, k)).unwrap();
        }
        let down = s.download(&x, c.host_buffer(n).unwrap()).unwrap();
        // Memory the context frees with work still queued on it, handed out again: the
        // stream's upload into it comes after that work, not under it.
        let y = c.upload(&input(n, 12)).unwrap();
        c.launch(mix_add, n, (&y, 9u32)).unwrap();
        drop(y);
        let z = c.zeroed::<u32>(n).unwrap();
        let zs = input(n, 13);
        let up = s.upload(host(&c, &zs), &z).unwrap();
        s.launch(mix_add, n, (&z, 1u32)).unwrap();
        let want: Vec<u32> = xs.iter().map(|&v| (0..4).fold(v, mix_add_ref)).collect();
        assert_eq!(&down.wait().unwrap()[..], &want[..]);
        up.wait().unwrap();
        s.synchronize().unwrap();
        let want: Vec<u32> = zs.iter().map(|&v| mix_add_ref(v, 1)).collect();
        assert_eq!(z.download().unwrap(), want);
    });
}

#[test]
fn queued_work_outlives_its_buffers_and_its_stream() {
    every_backend(|| {
        let c = ctx();
        let xs = input(2048, 3);
        let s = c.stream().unwrap();
        let x = c.zeroed::<u32>(xs.len()).unwrap();
        let up = s.upload(host(&c, &xs), &x).unwrap();
        s.launch(mix_add, xs.len(), (&x, 7u32)).unwrap();
        let down = s.download(&x, c.host_buffer(xs.len()).unwrap()).unwrap();
        let event = s.record();
        drop(x);
        drop(s);
        event.wait().unwrap();
        up.wait().unwrap();
        let want: Vec<u32> = xs.iter().map(|&v| mix_add_ref(v, 7)).collect();
        assert_eq!(&down.wait().unwrap()[..], &want[..]);
    });
}

#[test]
fn host_buffers_hold_zeros_or_a_copy_and_are_page_locked_only_on_cuda() {
    every_backend(|| {
        let c = ctx();
        let mut z = c.host_buffer::<f64>(5).unwrap();
        assert_eq!(&z[..], &[0.0; 5]);
        z[4] = -1.5;
        assert_eq!(z.to_vec(), [0.0, 0.0, 0.0, 0.0, -1.5]);
        let h = c.host_buffer_from(&[true, false, true]).unwrap();
        assert_eq!(&h[..], &[true, false, true]);
        assert!(c.host_buffer::<u8>(0).unwrap().is_empty());
        assert_eq!(
            h.is_page_locked(),
            c.device().backend == kiln::BackendKind::Cuda
        );
        let e = c.host_buffer::<u64>(usize::MAX / 4).unwrap_err();
        assert!(matches!(e, Error::HostOutOfMemory { .. }), "{e}");
    });
}
