//! Copies between host slices and device memory. The driver moves pageable memory (any Rust
//! slice) through its own small staging buffer, one piece at a time: about 7 GB/s to the
//! device and 13 back on an H100, where page-locked memory moves at 54. So a large copy goes
//! through two page-locked buffers of [`CHUNK`] bytes instead: while the device reads one, the
//! host threads of a [`Crew`] fill the other, and the other way round for downloads.

use crate::pinned::PinnedHost;
use cudarc::driver::result::{event, memcpy_dtoh_async, memcpy_htod_async};
use cudarc::driver::sys::{CUevent, CUevent_flags, CUstream};
use cudarc::driver::{CudaContext, CudaStream, DriverError};
use kiln_backend::PinnedMemory;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;

/// Bytes of each page-locked buffer, and of each piece a large copy is cut into.
pub(crate) const CHUNK: usize = 16 << 20;

/// Copies smaller than this go straight from or to the slice: the driver's own staging costs
/// them less than a wait on an event per piece.
pub(crate) const STAGED_FROM: usize = 1 << 20;

/// Bytes each host thread copies at a time between a slice and a page-locked buffer.
const HOST_PIECE: usize = 1 << 20;

/// The copies of one stream between host slices and device memory.
pub(crate) struct HostCopies {
    stream: Arc<CudaStream>,
    staging: Mutex<Slot>,
    /// Signalled when a copy gives the buffers back.
    returned: Condvar,
}

/// Where the page-locked buffers are.
enum Slot {
    /// Not made yet: the first large copy makes them.
    Unmade,
    /// A copy holds them. Another thread's large copy waits for them: the copies share the
    /// stream and the link anyway, and one straight from pageable memory would take the
    /// stream at a seventh of the speed. The holder waits on nothing but its [`Crew`] and the
    /// device, so the wait ends.
    InUse,
    Idle(Staging),
}

impl HostCopies {
    pub(crate) fn new(stream: Arc<CudaStream>) -> HostCopies {
        HostCopies {
            stream,
            staging: Mutex::new(Slot::Unmade),
            returned: Condvar::new(),
        }
    }

    /// Queues copies of `data` to the device address `dst`, which holds at least
    /// `data.len()` bytes, on the stream, with the context current on this thread. Returns
    /// the driver's error.
    ///
    /// # Safety
    /// `dst` must hold `data.len()` bytes, and the caller synchronizes the stream before
    /// `data` goes away or changes.
    pub(crate) unsafe fn upload(&self, dst: u64, data: &[u8]) -> Result<(), DriverError> {
        match self.staging_for(data.as_ptr(), data.len())? {
            // SAFETY: as this function's contract says.
            None => unsafe { memcpy_htod_async(dst, data, self.stream.cu_stream()) },
            Some(mut staging) => {
                // SAFETY: as this function's contract says.
                let copied = unsafe { staging.upload(dst, data, self.stream.cu_stream()) };
                self.give_back(staging);
                copied
            }
        }
    }

    /// Queues copies of the first `out.len()` bytes at the device address `src` into `out`.
    /// Returns the driver's error.
    ///
    /// # Safety
    /// `src` must hold `out.len()` bytes, and the caller synchronizes the stream before it
    /// reads `out` or lets it go away.
    pub(crate) unsafe fn download(&self, out: &mut [u8], src: u64) -> Result<(), DriverError> {
        match self.staging_for(out.as_ptr(), out.len())? {
            // SAFETY: as this function's contract says.
            None => unsafe { memcpy_dtoh_async(out, src, self.stream.cu_stream()) },
            Some(mut staging) => {
                // SAFETY: as this function's contract says.
                let copied = unsafe { staging.download(out, src, self.stream.cu_stream()) };
                self.give_back(staging);
                copied
            }
        }
    }

    /// The page-locked buffers, for a copy of `bytes` large enough to use them whose host
    /// side at `host` is not page-locked already, once no other copy holds them; made on
    /// first use. Returns the driver's error from making them.
    fn staging_for(&self, host: *const u8, bytes: usize) -> Result<Option<Staging>, DriverError> {
        if bytes < STAGED_FROM || crate::pinned::page_locked(host) {
            return Ok(None);
        }
        let mut slot = lock(&self.staging);
        loop {
            match std::mem::replace(&mut *slot, Slot::InUse) {
                Slot::Idle(staging) => return Ok(Some(staging)),
                Slot::InUse => slot = wait(&self.returned, slot),
                Slot::Unmade => {
                    return match Staging::new(self.stream.context().clone()) {
                        Ok(staging) => Ok(Some(staging)),
                        Err(e) => {
                            *slot = Slot::Unmade;
                            self.returned.notify_one();
                            Err(e)
                        }
                    }
                }
            }
        }
    }

    /// Puts the buffers back for the next copy.
    fn give_back(&self, staging: Staging) {
        *lock(&self.staging) = Slot::Idle(staging);
        self.returned.notify_one();
    }
}

/// `mutex`'s guard, also after a panic elsewhere (what it guards stays whole: every change
/// under these locks is one assignment).
fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// `guard` again once `signal` wakes this thread, as [`lock`] takes it.
fn wait<'a, T>(signal: &Condvar, guard: MutexGuard<'a, T>) -> MutexGuard<'a, T> {
    signal
        .wait(guard)
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Two page-locked buffers of [`CHUNK`] bytes, each with the event recorded after the last
/// device copy that used it, and the threads that fill and empty them.
struct Staging {
    buffers: [Pinned; 2],
    crew: Crew,
}

/// One page-locked buffer of [`CHUNK`] bytes and its event.
struct Pinned {
    host: PinnedHost,
    event: CUevent,
}

// SAFETY: the buffer is plain host memory and the event a driver handle; `HostCopies` hands
// a `Staging` to one copy at a time.
unsafe impl Send for Pinned {}

impl Staging {
    /// Allocates the buffers and their events, with the context current on this thread.
    fn new(context: Arc<CudaContext>) -> Result<Staging, DriverError> {
        let buffers = [Pinned::new(context.clone())?, Pinned::new(context)?];
        Ok(Staging {
            buffers,
            crew: Crew::new(),
        })
    }

    /// The buffer piece `i` of a copy uses, once the device is done with its last use.
    fn wait_for(&self, i: usize) -> Result<&Pinned, DriverError> {
        let pinned = &self.buffers[i % 2];
        // SAFETY: a live event; one never recorded counts as complete.
        unsafe { event::synchronize(pinned.event) }?;
        Ok(pinned)
    }

    /// Copies `data` to `dst` piece by piece: the host fills one buffer while the device
    /// reads the other. Returns with the last piece queued and `data` no longer needed.
    ///
    /// # Safety
    /// `dst` holds `data.len()` bytes; the context is current on this thread.
    unsafe fn upload(
        &mut self,
        dst: u64,
        data: &[u8],
        stream: CUstream,
    ) -> Result<(), DriverError> {
        for (i, piece) in data.chunks(CHUNK).enumerate() {
            let pinned = self.wait_for(i)?;
            // SAFETY: the buffer holds CHUNK bytes, and the device is done reading it.
            let staged =
                unsafe { std::slice::from_raw_parts_mut(pinned.host.as_ptr(), piece.len()) };
            self.crew.copy(staged, piece);
            // SAFETY: `dst` holds every piece; the buffer stays unchanged until the event
            // recorded after this copy completes.
            unsafe {
                memcpy_htod_async(dst + (i * CHUNK) as u64, &*staged, stream)?;
                event::record(pinned.event, stream)?;
            }
        }
        Ok(())
    }

    /// Copies from `src` into `out` piece by piece: the device fills one buffer while the
    /// host empties the other. Returns with `out` filled.
    ///
    /// # Safety
    /// `src` holds `out.len()` bytes; the context is current on this thread.
    unsafe fn download(
        &mut self,
        out: &mut [u8],
        src: u64,
        stream: CUstream,
    ) -> Result<(), DriverError> {
        let total = out.len();
        let pieces = total.div_ceil(CHUNK);
        let queue = |staging: &Staging, i: usize| -> Result<(), DriverError> {
            let pinned = staging.wait_for(i)?;
            let len = CHUNK.min(total - i * CHUNK);
            // SAFETY: the buffer holds CHUNK bytes and the host is done reading it; `src`
            // holds every piece.
            unsafe {
                let staged = std::slice::from_raw_parts_mut(pinned.host.as_ptr(), len);
                memcpy_dtoh_async(staged, src + (i * CHUNK) as u64, stream)?;
                event::record(pinned.event, stream)
            }
        };
        for i in 0..pieces.min(2) {
            queue(self, i)?;
        }
        for (i, piece) in out.chunks_mut(CHUNK).enumerate() {
            let pinned = self.wait_for(i)?;
            // SAFETY: the device has written the piece into the buffer.
            let staged = unsafe { std::slice::from_raw_parts(pinned.host.as_ptr(), piece.len()) };
            self.crew.copy(piece, staged);
            if i + 2 < pieces {
                queue(self, i + 2)?;
            }
        }
        Ok(())
    }
}

impl Pinned {
    /// One buffer and its event, with the context current on this thread.
    fn new(context: Arc<CudaContext>) -> Result<Pinned, DriverError> {
        let host = PinnedHost::new(context, CHUNK)?;
        let event = event::create(CUevent_flags::CU_EVENT_DISABLE_TIMING)?;
        Ok(Pinned { host, event })
    }
}

impl Drop for Pinned {
    /// Frees the event once the device is done with the buffer, with the context made
    /// current first (a `Context` may be dropped on a thread that never used it); the buffer
    /// is freed after it, by `PinnedHost`. A failure is recorded in the context, whose next
    /// call reports it, as `CudaMemory`'s are.
    fn drop(&mut self) {
        let context = self.host.context();
        context.record_err(context.bind_to_thread());
        // SAFETY: made by `Pinned::new` and used by nothing else; the wait lets the last
        // device copy finish first.
        unsafe {
            context.record_err(event::synchronize(self.event));
            context.record_err(event::destroy(self.event));
        }
    }
}

/// Threads that copy between host slices and the page-locked buffers, a [`HOST_PIECE`] each:
/// one core copies into page-locked memory slower than the device reads it. Its own threads,
/// not rayon's pool: a rayon worker waiting for its pieces could run another job of that
/// pool meanwhile, and a job that waits for the page-locked buffers this copy holds would
/// never end.
struct Crew {
    shared: Arc<CrewShared>,
    threads: Vec<JoinHandle<()>>,
}

struct CrewShared {
    job: Mutex<Job>,
    /// Signalled when a job comes or the crew is dropped.
    posted: Condvar,
    /// Signalled when the last piece of a job is copied.
    finished: Condvar,
}

/// One copy of `len` bytes from `src` to `dst`, in pieces: the addresses as integers, valid
/// while [`Crew::copy`] waits for every piece.
#[derive(Default)]
struct Job {
    src: usize,
    dst: usize,
    len: usize,
    /// The next piece nobody copies yet.
    next: usize,
    /// Pieces copied.
    done: usize,
    quit: bool,
}

impl Job {
    /// How many pieces of [`HOST_PIECE`] bytes the copy is cut into.
    fn pieces(&self) -> usize {
        self.len.div_ceil(HOST_PIECE)
    }

    /// The next piece to copy, counted as taken.
    fn take(&mut self) -> Option<(usize, usize, usize)> {
        (self.next < self.pieces()).then(|| {
            let at = self.next * HOST_PIECE;
            self.next += 1;
            (self.src + at, self.dst + at, HOST_PIECE.min(self.len - at))
        })
    }
}

impl Crew {
    /// Up to 7 threads besides the caller's, fewer on a host with fewer cores (8 threads
    /// filled page-locked memory faster than an H100 read it).
    fn new() -> Crew {
        let helpers = std::thread::available_parallelism().map_or(1, |n| n.get().min(8)) - 1;
        let shared = Arc::new(CrewShared {
            job: Mutex::new(Job::default()),
            posted: Condvar::new(),
            finished: Condvar::new(),
        });
        let threads = (0..helpers)
            .map_while(|_| {
                let shared = shared.clone();
                std::thread::Builder::new()
                    .name("kiln-cuda-copy".into())
                    .spawn(move || shared.work())
                    .ok()
            })
            .collect();
        Crew { shared, threads }
    }

    /// `dst.copy_from_slice(src)`, the caller's thread taking pieces too.
    fn copy(&self, dst: &mut [u8], src: &[u8]) {
        debug_assert_eq!(dst.len(), src.len(), "a staged copy's two sides");
        let shared = &self.shared;
        let mut job = lock(&shared.job);
        *job = Job {
            src: src.as_ptr() as usize,
            dst: dst.as_mut_ptr() as usize,
            len: src.len(),
            ..Job::default()
        };
        shared.posted.notify_all();
        job = shared.copy_pieces(job);
        while job.done < job.pieces() {
            job = wait(&shared.finished, job);
        }
        *job = Job::default();
    }
}

impl CrewShared {
    /// Copies pieces of the posted job until none is left, with `job` locked between them.
    fn copy_pieces<'a>(&'a self, mut job: MutexGuard<'a, Job>) -> MutexGuard<'a, Job> {
        while let Some((src, dst, len)) = job.take() {
            drop(job);
            // SAFETY: the piece lies within the posted slices, which `Crew::copy` keeps
            // borrowed until every piece is done, and no two pieces overlap.
            unsafe { std::ptr::copy_nonoverlapping(src as *const u8, dst as *mut u8, len) };
            job = lock(&self.job);
            job.done += 1;
            if job.done == job.pieces() {
                self.finished.notify_all();
            }
        }
        job
    }

    /// A helper thread's life: copy pieces of each job posted, until the crew is dropped.
    fn work(&self) {
        let mut job = lock(&self.job);
        while !job.quit {
            job = self.copy_pieces(job);
            job = wait(&self.posted, job);
        }
    }
}

impl Drop for Crew {
    fn drop(&mut self) {
        lock(&self.shared.job).quit = true;
        self.shared.posted.notify_all();
        for t in self.threads.drain(..) {
            // A helper only copies bytes and waits on these locks: it has no panic to report.
            t.join().ok();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{Crew, HOST_PIECE};

    /// Bytes that differ from their neighbours and from their offset's low byte.
    fn bytes(len: usize, seed: u32) -> Vec<u8> {
        (0..len as u32)
            .map(|i| (i.wrapping_mul(2_654_435_761) ^ seed).rotate_left(11) as u8)
            .collect()
    }

    #[test]
    fn a_crew_copies_every_byte_of_odd_sizes_job_after_job() {
        let crew = Crew::new();
        let sizes = [
            0,
            1,
            HOST_PIECE - 1,
            HOST_PIECE,
            HOST_PIECE + 1,
            3 * HOST_PIECE + 12_345,
        ];
        for (round, len) in sizes.into_iter().chain(sizes.into_iter().rev()).enumerate() {
            let src = bytes(len, round as u32);
            let mut dst = vec![0x5a; len + 3];
            crew.copy(&mut dst[1..len + 1], &src);
            assert_eq!(dst[0], 0x5a, "before the copy, round {round}");
            assert!(dst[1..len + 1] == src[..], "{len} bytes, round {round}");
            assert_eq!(dst[len + 1..], [0x5a; 2], "after the copy, round {round}");
        }
    }

    #[test]
    fn crews_copy_side_by_side_and_stop_when_dropped() {
        std::thread::scope(|s| {
            for t in 0..3u32 {
                s.spawn(move || {
                    let crew = Crew::new();
                    for len in [5 * HOST_PIECE / 2, 7] {
                        let src = bytes(len, t);
                        let mut dst = vec![0; len];
                        crew.copy(&mut dst, &src);
                        assert!(dst == src, "thread {t}, {len} bytes");
                    }
                });
            }
        });
    }
}
