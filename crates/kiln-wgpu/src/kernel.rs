//! A compiled WGSL kernel (its pipelines per group size) and launching it; device memory.

use super::*;

pub(crate) fn copy_err(reason: impl std::fmt::Display) -> BackendError {
    BackendError::InvalidLaunch {
        backend: BackendKind::Wgpu,
        kernel: String::new(),
        reason: reason.to_string(),
    }
}

pub(crate) struct WgpuKernel {
    pub(crate) kernel: Arc<Kernel>,
    /// What the kernel stores in the fault word, on adapters with a loop limit.
    pub(crate) fault_tag: Option<u32>,
    pub(crate) shader: Shader,
    pub(crate) module: wgpu::ShaderModule,
    pub(crate) layout: wgpu::BindGroupLayout,
    pub(crate) pipeline_layout: wgpu::PipelineLayout,
    /// Pipelines by group size followed by the dynamic shared lengths.
    pub(crate) pipelines: Mutex<HashMap<Vec<u32>, wgpu::ComputePipeline>>,
    pub(crate) shared: Arc<Shared>,
}

impl WgpuKernel {
    fn invalid(&self, reason: String) -> BackendError {
        BackendError::InvalidLaunch {
            backend: BackendKind::Wgpu,
            kernel: self.kernel.name.clone(),
            reason,
        }
    }

    fn pipeline(&self, key: Vec<u32>) -> Result<wgpu::ComputePipeline, BackendError> {
        let mut pipelines = self.pipelines.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(p) = pipelines.get(&key) {
            return Ok(p.clone());
        }
        let mut constants: Vec<(&str, f64)> = GROUP_SIZE_OVERRIDES
            .iter()
            .zip(&key)
            .map(|(n, v)| (*n, *v as f64))
            .collect();
        for (name, v) in self.shader.shared_overrides.iter().zip(&key[3..]) {
            constants.push((name.as_str(), (*v).max(1) as f64));
        }
        if let Some(tag) = self.fault_tag {
            constants.push((FAULT_TAG_OVERRIDE, tag as f64));
        }
        let device = &self.shared.device;
        let scope = device.push_error_scope(wgpu::ErrorFilter::Validation);
        let pipeline = device.create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
            label: Some(&self.kernel.name),
            layout: Some(&self.pipeline_layout),
            module: &self.module,
            entry_point: Some(&self.shader.entry),
            compilation_options: wgpu::PipelineCompilationOptions {
                constants: &constants,
                // Shared arrays start unspecified on GPU backends (as in CUDA and OpenCL);
                // naga's GL zeroing of a 272-element tile made a tiled transpose 5x slower.
                zero_initialize_workgroup_memory: false,
            },
            cache: None,
        });
        if let Some(e) = pollster::block_on(scope.pop()) {
            return Err(BackendError::Compile {
                backend: BackendKind::Wgpu,
                kernel: self.kernel.name.clone(),
                log: format!("creating the pipeline for group size {:?}: {e}", &key[..3]),
                source_text: self.shader.text.clone(),
            });
        }
        pipelines.insert(key, pipeline.clone());
        Ok(pipeline)
    }
}

impl CompiledKernel for WgpuKernel {
    fn as_any(&self) -> &dyn std::any::Any {
        self
    }

    fn launch(&self, grid: &Grid, args: &mut [LaunchArg<'_>]) -> Result<(), BackendError> {
        let k = &self.kernel;
        let shared = &self.shared;
        let limits = &shared.limits;
        let shape = check_launch(BackendKind::Wgpu, k, grid, args, shared.info.max_group_size)?;
        let dims = [
            limits.max_compute_workgroup_size_x,
            limits.max_compute_workgroup_size_y,
            limits.max_compute_workgroup_size_z,
        ];
        if let Some(a) = (0..3).find(|&a| grid.group_size[a] > dims[a]) {
            return Err(self.invalid(format!(
                "group size {:?}: {} allows {} work items along axis {a}",
                grid.group_size, shared.info.name, dims[a]
            )));
        }
        let shared_bytes: u64 = k
            .shared
            .iter()
            .zip(&shape.shared_lengths)
            .map(|(s, &n)| {
                let words: u64 = s
                    .elem
                    .flatten()
                    .iter()
                    .map(|(c, _)| if c.bits() == 64 { 8 } else { 4 })
                    .sum();
                n.max(1) as u64 * words
            })
            .sum();
        check_shared_bytes(
            &shared.info,
            shared_bytes,
            "kiln keeps one word per shared component",
        )?;
        if shape.groups == 0 {
            return Ok(());
        }
        let per_dim = limits.max_compute_workgroups_per_dimension as u64;
        let dispatch_x = shape.groups.min(per_dim);
        let dispatch_y = shape.groups.div_ceil(dispatch_x);
        if dispatch_y > per_dim {
            return Err(self.invalid(format!(
                "{} groups: {} dispatches at most {per_dim} x {per_dim}",
                shape.groups, shared.info.name
            )));
        }
        let mut key: Vec<u32> = grid.group_size.to_vec();
        for (s, &n) in k.shared.iter().zip(&shape.shared_lengths) {
            if s.len == SharedLen::Dynamic {
                key.push(n);
            }
        }
        let pipeline = self.pipeline(key)?;

        let mut words = vec![0u32; self.shader.args_words.max(4) as usize];
        words[..3].copy_from_slice(&grid.groups);
        let mut host_buffers: Vec<Option<wgpu::Buffer>> = Vec::new();
        // What each buffer parameter binds: a buffer and the byte offset in it.
        let mut bound: Vec<Option<(wgpu::Buffer, u64)>> = Vec::new();
        // Device memory bound in place, and whether the kernel may write it.
        let mut in_place: Vec<(wgpu::Buffer, bool)> = Vec::new();
        // Copies of views that the kernel may write, with the memory they go back to.
        let mut staged: Vec<(wgpu::Buffer, &WgpuMemory)> = Vec::new();
        for (i, ((p, a), slot)) in k
            .params
            .iter()
            .zip(args.iter())
            .zip(&self.shader.params)
            .enumerate()
        {
            match (&p.kind, a, slot) {
                (ParamKind::Buffer { access, .. }, a, ParamSlot::Buffer { len_word, .. }) => {
                    words[*len_word as usize] = shape.buffer_lengths[i] as u32;
                    if let LaunchArg::Device(m) = a {
                        let mem = wgpu_memory(*m)
                            .map_err(|e| self.invalid(format!("argument {i}: {e}")))?;
                        let written = *access != Access::Read;
                        // A binding starts on the adapter's alignment and holds what a
                        // buffer of the memory's size would (at least one of every element).
                        let (buf, origin) = place(mem);
                        let aligned = origin
                            .is_multiple_of(limits.min_storage_buffer_offset_alignment as u64)
                            && buf.size() - origin >= alloc_size(mem.bytes);
                        // wgpu refuses one buffer bound both writable and otherwise.
                        let clash = in_place.iter().any(|(b, w)| b == buf && (*w || written));
                        if aligned && !clash {
                            in_place.push((buf.clone(), written));
                            bound.push(Some((buf.clone(), origin)));
                        } else {
                            let copy = shared.create_buffer(mem.bytes)?;
                            shared.copy_region(place(mem), (&copy, 0), mem.bytes, true)?;
                            if written {
                                staged.push((copy.clone(), mem));
                            }
                            bound.push(Some((copy, 0)));
                        }
                        host_buffers.push(None);
                        continue;
                    }
                    host_buffers.push(match a {
                        LaunchArg::Read(b) => {
                            let buf = shared.create_buffer(b.len())?;
                            shared.write(&buf, 0, b);
                            Some(buf)
                        }
                        LaunchArg::ReadWrite(b) => {
                            let buf = shared.create_buffer(b.len())?;
                            shared.write(&buf, 0, b);
                            Some(buf)
                        }
                        _ => Some(shared.create_buffer(a.byte_len())?),
                    });
                    bound.push(host_buffers[i].clone().map(|b| (b, 0)));
                }
                (ParamKind::Value(t), LaunchArg::Value(bytes), ParamSlot::Value { first_word }) => {
                    let mut w = *first_word as usize;
                    for (s, off) in t.flatten() {
                        let b = &bytes[off as usize..(off + s.size()) as usize];
                        let mut raw = [0u8; 8];
                        raw[..b.len()].copy_from_slice(b);
                        let v = u64::from_le_bytes(raw);
                        let v = if s.is_signed() && s.bits() < 32 {
                            let shift = 64 - s.bits();
                            (((v << shift) as i64) >> shift) as u64
                        } else {
                            v
                        };
                        words[w] = v as u32;
                        w += 1;
                        if s.bits() == 64 {
                            words[w] = (v >> 32) as u32;
                            w += 1;
                        }
                    }
                    host_buffers.push(None);
                    bound.push(None);
                }
                _ => {
                    return Err(self.invalid(format!(
                        "argument {i} does not match parameter `{}`",
                        p.name
                    )))
                }
            }
        }
        let args_bytes: Vec<u8> = words.iter().flat_map(|w| w.to_le_bytes()).collect();
        let args_buf = shared
            .device
            .create_buffer_init(&wgpu::util::BufferInitDescriptor {
                label: Some("kiln_args"),
                contents: &args_bytes,
                usage: wgpu::BufferUsages::STORAGE,
            });
        let mut entries = vec![wgpu::BindGroupEntry {
            binding: 0,
            resource: args_buf.as_entire_binding(),
        }];
        for (slot, bound) in self.shader.params.iter().zip(&bound) {
            if let ParamSlot::Buffer { binding, .. } = slot {
                let Some((buffer, offset)) = bound else {
                    return Err(self.invalid("a buffer argument has no buffer".into()));
                };
                entries.push(wgpu::BindGroupEntry {
                    binding: *binding,
                    resource: wgpu::BindingResource::Buffer(wgpu::BufferBinding {
                        buffer,
                        offset: *offset,
                        size: None,
                    }),
                });
            }
        }
        if let (Some(binding), Some(f)) = (self.shader.fault_binding, &shared.loop_faults) {
            entries.push(wgpu::BindGroupEntry {
                binding,
                resource: f.buf.as_entire_binding(),
            });
        }
        let device = &shared.device;
        let scope = device.push_error_scope(wgpu::ErrorFilter::Validation);
        let bind_group = device.create_bind_group(&wgpu::BindGroupDescriptor {
            label: None,
            layout: &self.layout,
            entries: &entries,
        });
        let mut encoder = device.create_command_encoder(&wgpu::CommandEncoderDescriptor::default());
        {
            let mut pass = encoder.begin_compute_pass(&wgpu::ComputePassDescriptor::default());
            pass.set_pipeline(&pipeline);
            pass.set_bind_group(0, &bind_group, &[]);
            pass.dispatch_workgroups(dispatch_x as u32, dispatch_y as u32, 1);
        }
        shared.queue.submit([encoder.finish()]);
        if let Some(e) = pollster::block_on(scope.pop()) {
            return Err(self.invalid(format!("wgpu rejected the dispatch: {e}")));
        }
        for (copy, mem) in staged {
            let bytes = mem.bytes;
            shared.copy_region((&copy, 0), place(mem), bytes, ends_at(mem, bytes))?;
        }
        let mut copies: Vec<Readback<'_>> = Vec::new();
        for (a, host) in args.iter_mut().zip(&host_buffers) {
            let Some(buf) = host else { continue };
            let Some(out) = a.host_output() else { continue };
            copies.push((buf, 0, out));
        }
        shared.read_back(copies)
    }
}

/// One wgpu buffer holding `bytes` bytes (it is larger: see `alloc_size`).
pub(crate) struct WgpuAllocation {
    pub(crate) buf: wgpu::Buffer,
    pub(crate) bytes: usize,
}

/// wgpu device memory: a region of a buffer.
pub(crate) type WgpuMemory = Region<WgpuAllocation>;

/// The buffer of `mem` and where `mem` starts in it.
pub(crate) fn place(mem: &WgpuMemory) -> (&wgpu::Buffer, u64) {
    (&mem.allocation.buf, mem.origin as u64)
}

/// True when `bytes` bytes from the start of `mem` reach the end of its allocation, so the
/// padding after them in the last word is free.
pub(crate) fn ends_at(mem: &WgpuMemory, bytes: usize) -> bool {
    mem.origin + bytes == mem.allocation.bytes
}

pub(crate) fn wgpu_memory(mem: &dyn DeviceMemory) -> Result<&WgpuMemory, &'static str> {
    downcast_memory(mem)
}
