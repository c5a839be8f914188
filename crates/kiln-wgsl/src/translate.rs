//! WGSL to MSL, GLSL, HLSL and SPIR-V through naga.

use crate::{WriteError, GROUP_SIZE_OVERRIDES};
use naga::back::PipelineConstants;
use naga::valid::{Capabilities, ValidationFlags, Validator};
use naga::ShaderStage;

/// A language naga writes from kiln's WGSL.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum TranslateTarget {
    /// Metal Shading Language 2.x.
    Msl,
    /// Desktop GLSL 4.30 compute shader.
    Glsl,
    /// HLSL shader model 6.0.
    Hlsl,
    /// SPIR-V 1.3 for Vulkan 1.1.
    SpirV,
}

/// A translated shader.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Translated {
    /// Source text (MSL, GLSL, HLSL).
    Text(String),
    /// A SPIR-V module.
    SpirV(Vec<u32>),
}

/// Parses and validates `wgsl` (a shader from [`crate::write_kernel`] with entry point
/// `entry`), fixes its group size to `group_size` and every dynamic shared array to one
/// element per work item, and writes it as `target`. Shared arrays are left unzeroed, as the
/// wgpu backend runs them (kiln's shared memory starts unspecified on GPUs). Fails with
/// naga's message, showing the WGSL line it refers to.
pub fn translate(
    wgsl: &str,
    entry: &str,
    group_size: [u32; 3],
    target: TranslateTarget,
) -> Result<Translated, WriteError> {
    let module = naga::front::wgsl::parse_str(wgsl).map_err(|e| {
        WriteError(format!(
            "naga cannot parse the WGSL: {}",
            e.emit_to_string(wgsl)
        ))
    })?;
    let info = Validator::new(ValidationFlags::all(), Capabilities::all())
        .validate(&module)
        .map_err(|e| WriteError(format!("naga rejects the WGSL: {}", e.emit_to_string(wgsl))))?;
    let mut constants = PipelineConstants::default();
    for (name, size) in GROUP_SIZE_OVERRIDES.iter().zip(group_size) {
        constants.insert(name.to_string(), size as f64);
    }
    let items: u32 = group_size.iter().product();
    for o in module.overrides.iter() {
        if let Some(name) =
            o.1.name
                .as_ref()
                .filter(|n| n.starts_with("kiln_shared_len_"))
        {
            constants.insert(name.clone(), items as f64);
        }
    }
    let (module, info) = naga::back::pipeline_constants::process_overrides(
        &module,
        &info,
        Some((ShaderStage::Compute, entry)),
        &constants,
    )
    .map_err(|e| WriteError(format!("setting pipeline constants: {e}")))?;
    let fail =
        |lang: &str, e: &dyn std::fmt::Display| WriteError(format!("naga {lang} writer: {e}"));
    Ok(match target {
        TranslateTarget::SpirV => {
            let options = naga::back::spv::Options {
                lang_version: (1, 3),
                zero_initialize_workgroup_memory:
                    naga::back::spv::ZeroInitializeWorkgroupMemoryMode::None,
                ..Default::default()
            };
            let pipeline = naga::back::spv::PipelineOptions {
                shader_stage: ShaderStage::Compute,
                entry_point: entry.to_string(),
            };
            Translated::SpirV(
                naga::back::spv::write_vec(&module, &info, &options, Some(&pipeline))
                    .map_err(|e| fail("SPIR-V", &e))?,
            )
        }
        TranslateTarget::Glsl => {
            let options = naga::back::glsl::Options {
                version: naga::back::glsl::Version::Desktop(430),
                zero_initialize_workgroup_memory: false,
                ..Default::default()
            };
            let pipeline = naga::back::glsl::PipelineOptions {
                shader_stage: ShaderStage::Compute,
                entry_point: entry.to_string(),
                multiview: None,
            };
            let mut text = String::new();
            naga::back::glsl::Writer::new(
                &mut text,
                &module,
                &info,
                &options,
                &pipeline,
                naga::proc::BoundsCheckPolicies::default(),
            )
            .and_then(|mut w| w.write())
            .map_err(|e| fail("GLSL", &e))?;
            Translated::Text(text)
        }
        TranslateTarget::Hlsl => {
            let options = naga::back::hlsl::Options {
                shader_model: naga::back::hlsl::ShaderModel::V6_0,
                zero_initialize_workgroup_memory: false,
                ..Default::default()
            };
            let pipeline = naga::back::hlsl::PipelineOptions {
                entry_point: Some((ShaderStage::Compute, entry.to_string())),
            };
            let mut text = String::new();
            naga::back::hlsl::Writer::new(&mut text, &options, &pipeline)
                .write(&module, &info, None)
                .map_err(|e| fail("HLSL", &e))?;
            Translated::Text(text)
        }
        TranslateTarget::Msl => {
            let options = naga::back::msl::Options {
                lang_version: (2, 1),
                zero_initialize_workgroup_memory: false,
                ..Default::default()
            };
            let pipeline = naga::back::msl::PipelineOptions {
                entry_point: Some((ShaderStage::Compute, entry.to_string())),
                ..Default::default()
            };
            let (text, _) = naga::back::msl::write_string(&module, &info, &options, &pipeline)
                .map_err(|e| fail("MSL", &e))?;
            Translated::Text(text)
        }
    })
}
