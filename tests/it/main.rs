//! kiln's integration tests, one binary with a module per area (so the suite links once):
//! the conformance harness in `common`, then backends, buffers, caches, IR rules, kernels (the
//! gallery, the macro, generated-code snapshots), random programs and properties, queries,
//! groupings and sorts by composite keys.

mod common;
#[allow(dead_code)]
#[path = "../../examples/gallery/mod.rs"]
mod gallery;

mod backends;
mod buffer_slices;
mod buffers;
mod cache;
mod compile_options;
mod concat;
mod disk_cache;
mod dynamic;
mod flat_map;
mod groups;
mod half_floats;
mod ir_rules;
mod join;
mod kernels;
mod native_code;
mod positions;
mod programs;
mod properties;
mod queries;
mod sorts;
mod streams;
mod struct_rows;
mod volumes;
