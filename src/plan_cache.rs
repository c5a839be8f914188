//! The plan cache: the compiled kernels of a query plan, found again by the plan's
//! fingerprint, so a query that runs again neither builds its kernels' IR nor hashes it.
//!
//! A query's kernels follow from the plan (its name and settings), the column types and the
//! IR its closures emit. The fingerprint is a small kernel holding exactly those: the input
//! columns, the settings as literals, and one application of every closure in a row. It
//! costs a tenth of building the plan's kernels, which a cache hit skips together with their
//! structural hash and compare in the [`KernelCache`](crate::KernelCache).
//!
//! The closures' own constants (a captured `k` in `move |x| x * k`) are recorded apart from
//! the fingerprint's shape (see [`kiln_ir::constants`]). A shape's first plan is compiled
//! with every constant in place, as literals the compilers fold. When the same shape comes
//! again with other values, the constants that differ become kernel parameters: that plan
//! serves every later value of them, so a loop over `k` compiles twice, not once per `k`.
//! Only 32- and 64-bit numbers become parameters; a `bool` or a byte that changes gets a plan
//! per value.

use crate::error::Result;
use kiln_backend::{CompiledKernel, LaunchArg};
use kiln_ir::constants::{constant_param_name, hoist_constants, ConstantSlot, RecordedConstants};
use kiln_ir::{kernel_hash, Access, Kernel, KernelHash, ParamKind, ScalarType, ScalarValue};
use rustc_hash::FxHashMap;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// A query plan's fingerprint: its shape (a kernel whose user constants are parameters) and
/// the values of those constants in this call.
pub(crate) struct Fingerprint {
    /// The kernel of the plan's settings and closures, constants as parameters.
    pub shape: Kernel,
    /// The constants user code emitted.
    pub constants: RecordedConstants,
}

/// What a compiled kernel's parameter takes at launch.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum ParamSlot {
    /// The call's constant number `j` (a captured value hoisted into a parameter).
    Constant(usize),
    /// A buffer, named and with the kernel's access to it.
    Buffer(String, Access),
    /// A value, named.
    Value(String),
}

/// One compiled kernel of a plan, with the name its launch span gives.
pub(crate) struct PlannedKernel {
    /// The kernel's name.
    pub name: String,
    /// The backend's compiled kernel.
    pub compiled: Arc<dyn CompiledKernel>,
    /// The kernel's parameters, in order.
    pub params: Vec<ParamSlot>,
}

/// The compiled kernels of a plan, in the order its builder returned them, with the values
/// of this call's constants.
#[derive(Clone)]
pub(crate) struct CompiledPlan {
    kernels: Arc<[PlannedKernel]>,
    constants: Vec<ScalarValue>,
}

/// Kernel `index` of a plan, ready to launch with the call's constants.
pub(crate) struct ReadyKernel<'p> {
    /// The kernel.
    pub kernel: &'p PlannedKernel,
    constants: &'p [ScalarValue],
}

impl CompiledPlan {
    /// Kernel `index` (in the order the plan's builder returned them).
    pub(crate) fn kernel(&self, index: usize) -> ReadyKernel<'_> {
        ReadyKernel {
            kernel: &self.kernels[index],
            constants: &self.constants,
        }
    }
}

impl ReadyKernel<'_> {
    /// The argument of constant parameter `j`.
    pub(crate) fn constant(&self, j: usize) -> LaunchArg<'static> {
        LaunchArg::Value(self.constants[j].to_le_bytes())
    }
}

/// True for the types whose constants may become parameters.
fn hoistable(ty: ScalarType) -> bool {
    matches!(
        ty,
        ScalarType::I32
            | ScalarType::U32
            | ScalarType::F32
            | ScalarType::I64
            | ScalarType::U64
            | ScalarType::F64
    )
}

/// The plans of one shape.
struct ShapeEntry {
    shape: Kernel,
    /// The constants of the shape's first call.
    first: Vec<u64>,
    /// Which constants are parameters in the shape's plans of `general`.
    hoisted: Vec<bool>,
    /// Plans with every constant a literal, by the constants' bits.
    exact: FxHashMap<ConstantBits, Arc<[PlannedKernel]>>,
    /// Plans whose `hoisted` constants are parameters, by the bits of the others (zero in
    /// place of each parameter).
    general: FxHashMap<ConstantBits, Arc<[PlannedKernel]>>,
}

/// The bits of a call's constants, the key of a shape's plans. Two keys without constants
/// (most queries) are equal without a `memcmp`: comparing slices of integers calls it, and
/// glibc's AVX-512 `memcmp` reads the dangling pointer of an empty vector with a masked load
/// from page zero, which takes a microcode assist (10% of a cached 1000-element `sum()`).
#[derive(Clone, Debug)]
struct ConstantBits(Vec<u64>);

impl std::hash::Hash for ConstantBits {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.0.hash(state)
    }
}

impl PartialEq for ConstantBits {
    fn eq(&self, other: &Self) -> bool {
        match (self.0.is_empty(), other.0.is_empty()) {
            (true, true) => true,
            (false, false) => self.0 == other.0,
            _ => false,
        }
    }
}

impl Eq for ConstantBits {}

/// Shapes whose calls skip hashing their fingerprint: see [`Shapes::recent`].
const RECENT: usize = 4;

/// Plans kept per shape, with literal constants and with parameters each: past that, that
/// map starts again (a loop over a captured value settles on its parameter plan at once).
const PLANS_PER_SHAPE: usize = 64;

/// Compiled plans by fingerprint (the shape kernel is kept to rule out hash collisions), at
/// most `capacity` shapes: past that the least recently used shape is dropped.
pub(crate) struct PlanCache {
    shapes: Mutex<Shapes>,
    hits: AtomicU64,
}

struct Shapes {
    /// Each shape's plans and when it was last used (a tick of `clock`).
    map: FxHashMap<KernelHash, (ShapeEntry, u64)>,
    /// The hashes of the shapes used last, the latest first (some may have left `map`): a
    /// call of one of them finds its shape by comparison alone, without hashing it (the hash
    /// walks the whole fingerprint: 6-7% of a cached `sum()` of 1,000 elements).
    recent: [Option<KernelHash>; RECENT],
    clock: u64,
    capacity: usize,
}

impl Default for PlanCache {
    fn default() -> Self {
        PlanCache {
            shapes: Mutex::new(Shapes {
                map: FxHashMap::default(),
                recent: [None; RECENT],
                clock: 0,
                capacity: crate::context::DEFAULT_CACHE_CAPACITY,
            }),
            hits: AtomicU64::new(0),
        }
    }
}

impl Shapes {
    /// The hash of `shape` when it is one of the recent shapes.
    fn recent_hash(&self, shape: &Kernel) -> Option<KernelHash> {
        self.recent.iter().flatten().copied().find(|h| {
            self.map
                .get(h)
                .is_some_and(|(entry, _)| entry.shape == *shape)
        })
    }

    /// Makes `hash` the latest of the recent shapes.
    fn touch(&mut self, hash: KernelHash) {
        let at = self
            .recent
            .iter()
            .position(|r| *r == Some(hash))
            .unwrap_or(RECENT - 1);
        self.recent[..=at].rotate_right(1);
        self.recent[0] = Some(hash);
    }

    /// Drops least recently used shapes until at most `keep` remain.
    fn shrink_to(&mut self, keep: usize) {
        while self.map.len() > keep {
            let oldest = self
                .map
                .iter()
                .min_by_key(|(_, (_, used))| *used)
                .map(|(h, _)| *h);
            match oldest {
                Some(h) => self.map.remove(&h),
                None => break,
            };
        }
    }
}

/// The key in [`ShapeEntry::general`] of the constants `bits`.
fn general_key(bits: &[u64], hoisted: &[bool]) -> ConstantBits {
    ConstantBits(
        bits.iter()
            .zip(hoisted)
            .map(|(b, h)| if *h { 0 } else { *b })
            .collect(),
    )
}

impl PlanCache {
    /// The plan cached for `fingerprint`, or else the kernels of `build`, each compiled with
    /// `compile`, cached under `fingerprint` (not cached when there is none). When the
    /// fingerprint's shape has a plan already but its constants differ, the differing ones
    /// become parameters of the new plan (see the module). Returns the first error of `build`
    /// or `compile` (nothing is cached then).
    pub(crate) fn get_or_build(
        &self,
        fingerprint: Option<Fingerprint>,
        build: impl FnOnce() -> Result<Vec<Kernel>>,
        compile: impl Fn(&Kernel) -> Result<Arc<dyn CompiledKernel>>,
    ) -> Result<CompiledPlan> {
        let Some(fp) = fingerprint else {
            let kernels = compile_all(build()?, &HashMap::new(), &compile)?;
            return Ok(CompiledPlan {
                kernels,
                constants: Vec::new(),
            });
        };
        let bits = ConstantBits(fp.constants.values.iter().map(|v| v.to_bits()).collect());
        let (hash, hoisted) = {
            let mut shapes = self.shapes.lock().unwrap_or_else(|p| p.into_inner());
            // `same`: the shape is known to be the one cached under `hash`.
            let (hash, same) = match shapes.recent_hash(&fp.shape) {
                Some(hash) => (hash, true),
                None => {
                    drop(shapes);
                    let hash = kernel_hash(&fp.shape);
                    shapes = self.shapes.lock().unwrap_or_else(|p| p.into_inner());
                    (hash, false)
                }
            };
            shapes.clock += 1;
            let clock = shapes.clock;
            let hoisted = match shapes.map.get_mut(&hash) {
                Some((entry, used)) if same || entry.shape == fp.shape => {
                    *used = clock;
                    let found = entry.exact.get(&bits).or_else(|| {
                        (!entry.general.is_empty())
                            .then(|| entry.general.get(&general_key(&bits.0, &entry.hoisted)))
                            .flatten()
                    });
                    if let Some(kernels) = found {
                        let kernels = kernels.clone();
                        shapes.touch(hash);
                        self.hits.fetch_add(1, Ordering::Relaxed);
                        return Ok(CompiledPlan {
                            kernels,
                            constants: fp.constants.values,
                        });
                    }
                    let mut grown = false;
                    for (j, v) in fp.constants.values.iter().enumerate() {
                        let hoist = bits.0[j] != entry.first[j] && hoistable(v.ty());
                        grown |= hoist && !entry.hoisted[j];
                        entry.hoisted[j] |= hoist;
                    }
                    if grown {
                        // Keys of plans with fewer parameters would read alike.
                        entry.general.clear();
                    }
                    Some(entry.hoisted.clone())
                }
                Some(_) => None,
                None => Some(vec![false; bits.0.len()]),
            };
            (hash, hoisted)
        };
        let constants = fp.constants.values;
        let Some(hoisted) = hoisted else {
            // Another shape holds this hash: build without caching.
            let kernels = compile_all(build()?, &HashMap::new(), &compile)?;
            return Ok(CompiledPlan { kernels, constants });
        };
        let slots: Vec<(ConstantSlot, usize)> = fp
            .constants
            .slots
            .iter()
            .enumerate()
            .filter(|(j, _)| hoisted[*j])
            .map(|(j, s)| (*s, j))
            .collect();
        let names: HashMap<String, usize> = slots
            .iter()
            .map(|(_, j)| (constant_param_name(*j), *j))
            .collect();
        let parameterized: Vec<Kernel> = build()?
            .into_iter()
            .map(|k| hoist_constants(k, &slots))
            .collect();
        let kernels = compile_all(parameterized, &names, &compile)?;
        let mut shapes = self.shapes.lock().unwrap_or_else(|p| p.into_inner());
        if !shapes.map.contains_key(&hash) {
            let keep = shapes.capacity.saturating_sub(1);
            shapes.shrink_to(keep);
        }
        let clock = shapes.clock;
        let (entry, _) = shapes.map.entry(hash).or_insert_with(|| {
            let entry = ShapeEntry {
                shape: fp.shape,
                first: bits.0.clone(),
                hoisted: vec![false; bits.0.len()],
                exact: FxHashMap::default(),
                general: FxHashMap::default(),
            };
            (entry, clock)
        });
        let into = if !hoisted.contains(&true) {
            Some((&mut entry.exact, bits))
        } else if entry.hoisted == hoisted {
            Some((&mut entry.general, general_key(&bits.0, &hoisted)))
        } else {
            None
        };
        if let Some((plans, key)) = into {
            if plans.len() >= PLANS_PER_SHAPE {
                plans.clear();
            }
            plans.entry(key).or_insert(kernels.clone());
        }
        shapes.touch(hash);
        Ok(CompiledPlan { kernels, constants })
    }

    /// Keeps plans of at most `capacity` shapes (at least one), dropping the least recently
    /// used.
    pub(crate) fn set_capacity(&self, capacity: usize) {
        let mut shapes = self.shapes.lock().unwrap_or_else(|p| p.into_inner());
        shapes.capacity = capacity.max(1);
        let keep = shapes.capacity;
        shapes.shrink_to(keep);
    }

    /// Drops every plan.
    pub(crate) fn clear(&self) {
        self.shapes
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .map
            .clear();
    }

    /// How many plans were found in the cache so far.
    pub(crate) fn hits(&self) -> u64 {
        self.hits.load(Ordering::Relaxed)
    }
}

/// Compiles each of `kernels`, noting the parameters among `constants` (by name) each reads.
fn compile_all(
    kernels: Vec<Kernel>,
    constants: &HashMap<String, usize>,
    compile: &impl Fn(&Kernel) -> Result<Arc<dyn CompiledKernel>>,
) -> Result<Arc<[PlannedKernel]>> {
    kernels
        .iter()
        .map(|k| {
            Ok(PlannedKernel {
                name: k.name.clone(),
                compiled: compile(k)?,
                params: k
                    .params
                    .iter()
                    .map(|p| match (constants.get(&p.name), &p.kind) {
                        (Some(j), _) => ParamSlot::Constant(*j),
                        (None, ParamKind::Buffer { access, .. }) => {
                            ParamSlot::Buffer(p.name.clone(), *access)
                        }
                        (None, ParamKind::Value(_)) => ParamSlot::Value(p.name.clone()),
                    })
                    .collect(),
            })
        })
        .collect()
}
