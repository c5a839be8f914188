//! NVRTC, the CUDA C compiler library, loaded at run time by kiln itself so that both CUDA 12
//! (`libnvrtc.so.12`) and CUDA 13 (`libnvrtc.so.13`) are found.
//!
//! [`Nvrtc::load`] takes the file `KILN_NVRTC` names when it is set, and nothing else. Otherwise
//! it tries every versioned NVRTC it can find, newest major version first, then the bare
//! `libnvrtc.so` (so a distribution's old NVRTC on the loader's path never wins over a
//! toolkit's): by name on the loader's path (`LD_LIBRARY_PATH`, the system folders), then in
//! `$CUDA_HOME/lib64`, `$CUDA_PATH/lib64`, `$CONDA_PREFIX/lib`, the `nvidia-cuda-nvrtc`
//! wheels' folders (`nvidia/cu13/lib`, `nvidia/cuda_nvrtc/lib` under the site-packages of
//! `$VIRTUAL_ENV`, `$CONDA_PREFIX`, `~/.local`, `/usr/local` and `/usr`), `/usr/local/cuda/lib64`
//! and `/usr/local/cuda-*/lib64`. The first that loads and whose major version the driver
//! supports is used.

use kiln_backend::{BackendError, BackendKind};
use libloading::Library;
use std::ffi::{c_char, c_int, c_void, CStr, CString, OsString};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

/// What kiln calls the library in errors: any major version of NVRTC it can load.
pub const NVRTC_LIBRARY: &str = "libnvrtc (CUDA 12 or 13)";

/// The file names NVRTC has and the major version each names (`None`: any), newest first.
/// `.alt` builds are what some images ship instead (an H100 image had only
/// `libnvrtc.alt.so.13` in `/usr/local/cuda/lib64`).
#[cfg(windows)]
const NAMES: [(&str, Option<u32>); 2] = [
    ("nvrtc64_130_0.dll", Some(13)),
    ("nvrtc64_120_0.dll", Some(12)),
];
#[cfg(not(windows))]
const NAMES: [(&str, Option<u32>); 5] = [
    ("libnvrtc.so.13", Some(13)),
    ("libnvrtc.alt.so.13", Some(13)),
    ("libnvrtc.so.12", Some(12)),
    ("libnvrtc.alt.so.12", Some(12)),
    ("libnvrtc.so", None),
];

/// What NVRTC makes of a program.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Output {
    /// PTX text (for a `compute_XX` or `sm_XX` architecture), which the driver can JIT.
    Ptx,
    /// A cubin: machine code for exactly one `sm_XX`.
    Cubin,
}

type Program = *mut c_void;
type Status = c_int;

/// The NVRTC entry points kiln calls. The pointers stay valid while the `Library` they came
/// from is loaded, which [`Nvrtc`] guarantees by owning it.
struct Api {
    version: unsafe extern "C" fn(*mut c_int, *mut c_int) -> Status,
    num_archs: unsafe extern "C" fn(*mut c_int) -> Status,
    archs: unsafe extern "C" fn(*mut c_int) -> Status,
    create: unsafe extern "C" fn(
        *mut Program,
        *const c_char,
        *const c_char,
        c_int,
        *const *const c_char,
        *const *const c_char,
    ) -> Status,
    destroy: unsafe extern "C" fn(*mut Program) -> Status,
    compile: unsafe extern "C" fn(Program, c_int, *const *const c_char) -> Status,
    log_size: unsafe extern "C" fn(Program, *mut usize) -> Status,
    log: unsafe extern "C" fn(Program, *mut c_char) -> Status,
    ptx_size: unsafe extern "C" fn(Program, *mut usize) -> Status,
    ptx: unsafe extern "C" fn(Program, *mut c_char) -> Status,
    cubin_size: unsafe extern "C" fn(Program, *mut usize) -> Status,
    cubin: unsafe extern "C" fn(Program, *mut c_char) -> Status,
    error_string: unsafe extern "C" fn(Status) -> *const c_char,
}

/// One loaded NVRTC library.
pub struct Nvrtc {
    api: Api,
    path: PathBuf,
    version: (u32, u32),
    archs: Vec<u32>,
    _library: Library,
    /// NVRTC's builtins library from the same folder, which NVRTC opens by bare name while
    /// compiling; loading it first lets a library outside the loader's path work.
    _builtins: Vec<Library>,
}

// SAFETY: NVRTC's functions are thread-safe (each program is used by one call at a time here),
// and the library handle is only kept alive.
unsafe impl Send for Nvrtc {}
// SAFETY: as above.
unsafe impl Sync for Nvrtc {}

fn unavailable(reason: String) -> BackendError {
    BackendError::Unavailable {
        backend: BackendKind::Cuda,
        library: NVRTC_LIBRARY.into(),
        reason,
    }
}

impl Nvrtc {
    /// Opens the NVRTC library at `path` (a file path, or a bare name the system loader
    /// searches for). Fails with `Unavailable` when it cannot be loaded or lacks an entry point.
    pub fn open(path: impl AsRef<Path>) -> Result<Nvrtc, BackendError> {
        let path = path.as_ref().to_path_buf();
        let fail = |what: String| unavailable(format!("{}: {what}", path.display()));
        let builtins = builtins_beside(&path)
            .into_iter()
            // SAFETY: as for NVRTC below.
            .map(|b| unsafe { Library::new(&b) }.map_err(|e| fail(format!("{}: {e}", b.display()))))
            .collect::<Result<Vec<_>, _>>()?;
        // SAFETY: loading NVRTC runs only its own initializers.
        let library = unsafe { Library::new(path.as_os_str()) }.map_err(|e| fail(e.to_string()))?;
        macro_rules! symbol {
            ($name:literal) => {
                // SAFETY: the declared type is the one NVRTC's header gives this symbol.
                *unsafe { library.get(concat!($name, "\0").as_bytes()) }
                    .map_err(|e| fail(format!("no `{}`: {e}", $name)))?
            };
        }
        let api = Api {
            version: symbol!("nvrtcVersion"),
            num_archs: symbol!("nvrtcGetNumSupportedArchs"),
            archs: symbol!("nvrtcGetSupportedArchs"),
            create: symbol!("nvrtcCreateProgram"),
            destroy: symbol!("nvrtcDestroyProgram"),
            compile: symbol!("nvrtcCompileProgram"),
            log_size: symbol!("nvrtcGetProgramLogSize"),
            log: symbol!("nvrtcGetProgramLog"),
            ptx_size: symbol!("nvrtcGetPTXSize"),
            ptx: symbol!("nvrtcGetPTX"),
            cubin_size: symbol!("nvrtcGetCUBINSize"),
            cubin: symbol!("nvrtcGetCUBIN"),
            error_string: symbol!("nvrtcGetErrorString"),
        };
        let (mut major, mut minor) = (0, 0);
        // SAFETY: writes two ints.
        if unsafe { (api.version)(&mut major, &mut minor) } != 0 {
            return Err(fail("nvrtcVersion failed".into()));
        }
        let mut count = 0;
        // SAFETY: writes one int, then `count` ints into a buffer of that size.
        let archs = unsafe {
            if (api.num_archs)(&mut count) != 0 || count < 0 {
                return Err(fail("nvrtcGetNumSupportedArchs failed".into()));
            }
            let mut archs = vec![0 as c_int; count as usize];
            if count > 0 && (api.archs)(archs.as_mut_ptr()) != 0 {
                return Err(fail("nvrtcGetSupportedArchs failed".into()));
            }
            archs
        };
        Ok(Nvrtc {
            api,
            path,
            version: (major.max(0) as u32, minor.max(0) as u32),
            archs: archs.into_iter().map(|a| a.max(0) as u32).collect(),
            _library: library,
            _builtins: builtins,
        })
    }

    /// Where kiln looks for NVRTC, in order (see the module docs). `KILN_NVRTC`, when set, is
    /// the only place.
    pub fn candidates() -> Vec<PathBuf> {
        candidates_from(|name| std::env::var_os(name))
    }

    /// The first NVRTC among [`Nvrtc::candidates`] that loads and whose major version is at
    /// most `max_major` (the CUDA driver's, so its cubins load; `None` takes any). Fails with
    /// `Unavailable` listing every place tried and why each failed.
    pub fn load(max_major: Option<u32>) -> Result<Nvrtc, BackendError> {
        let mut tried = Vec::new();
        for path in Self::candidates() {
            match Nvrtc::open(&path) {
                Ok(n) if max_major.is_none_or(|m| n.version.0 <= m) => return Ok(n),
                Ok(n) => tried.push(format!(
                    "{} is NVRTC {}.{}, newer than the CUDA {} allowed",
                    path.display(),
                    n.version.0,
                    n.version.1,
                    max_major.unwrap_or_default()
                )),
                Err(BackendError::Unavailable { reason, .. }) => tried.push(reason),
                Err(e) => tried.push(e.to_string()),
            }
        }
        Err(unavailable(format!(
            "tried {}. Install the CUDA toolkit or `pip install nvidia-cuda-nvrtc-cu12` and put \
             its lib folder on LD_LIBRARY_PATH, or set KILN_NVRTC to the library's path",
            tried.join("; ")
        )))
    }

    /// The NVRTC this process compiles with when no driver constrains the choice: the first
    /// [`Nvrtc::load`] finds, loaded once. Fails with `Unavailable` as `load` does.
    pub fn shared() -> Result<&'static Nvrtc, BackendError> {
        static SHARED: OnceLock<Result<Nvrtc, BackendError>> = OnceLock::new();
        SHARED
            .get_or_init(|| Nvrtc::load(None))
            .as_ref()
            .map_err(Clone::clone)
    }

    /// The file or name this library was loaded from.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// NVRTC's (major, minor) version, e.g. (12, 9).
    pub fn version(&self) -> (u32, u32) {
        self.version
    }

    /// The `sm_XX` numbers (e.g. 90) this NVRTC can compile for, ascending.
    pub fn supported_archs(&self) -> &[u32] {
        &self.archs
    }

    /// What this NVRTC compiles for on a device of compute capability `cc` (90 for 9.0): a
    /// cubin for `sm_cc` when NVRTC knows the device, else PTX for the newest `compute_XX`
    /// below it, which the driver finishes on load. `Unavailable` when NVRTC knows no
    /// architecture at or below `cc`.
    pub fn target_for(&self, cc: u32) -> Result<(String, Output), BackendError> {
        if self.archs.contains(&cc) {
            return Ok((format!("sm_{cc}"), Output::Cubin));
        }
        match self.archs.iter().filter(|&&a| a <= cc).max() {
            Some(a) => Ok((format!("compute_{a}"), Output::Ptx)),
            None => Err(unavailable(format!(
                "{}: NVRTC {}.{} compiles for sm_{:?}, none of which runs on this sm_{cc} device",
                self.path.display(),
                self.version.0,
                self.version.1,
                self.archs
            ))),
        }
    }

    /// Compiles CUDA C `source` (whose kernel is `kernel`, named in errors) for `arch`
    /// (`sm_90`, or `compute_90` for PTX only) with extra `options`, to PTX or a cubin. Fails
    /// with `Compile` carrying NVRTC's log, the options and the source.
    pub fn compile(
        &self,
        kernel: &str,
        source: &str,
        arch: &str,
        options: &[impl AsRef<str>],
        output: Output,
    ) -> Result<Vec<u8>, BackendError> {
        let fail = |log: String| BackendError::Compile {
            backend: BackendKind::Cuda,
            kernel: kernel.into(),
            log,
            source_text: source.into(),
        };
        let cstr = |s: &str| CString::new(s).map_err(|_| fail(format!("{s:?} contains a NUL")));
        let src = cstr(source)?;
        let name = cstr(&format!("{kernel}.cu"))?;
        let mut all = vec![format!("--gpu-architecture={arch}")];
        all.extend(options.iter().map(|o| o.as_ref().to_string()));
        let owned = all.iter().map(|o| cstr(o)).collect::<Result<Vec<_>, _>>()?;
        let pointers: Vec<*const c_char> = owned.iter().map(|o| o.as_ptr()).collect();
        let mut prog: Program = std::ptr::null_mut();
        // SAFETY: `src` and `name` are NUL-terminated and outlive the call; no headers.
        let status = unsafe {
            (self.api.create)(
                &mut prog,
                src.as_ptr(),
                name.as_ptr(),
                0,
                std::ptr::null(),
                std::ptr::null(),
            )
        };
        if status != 0 {
            return Err(fail(format!(
                "nvrtcCreateProgram: {}",
                self.status_text(status)
            )));
        }
        // SAFETY: `prog` is a live program and `pointers` holds `all.len()` C strings.
        let status =
            unsafe { (self.api.compile)(prog, pointers.len() as c_int, pointers.as_ptr()) };
        let out = if status != 0 {
            Err(fail(format!(
                "NVRTC {}.{} ({}), {}:\n{}",
                self.version.0,
                self.version.1,
                all.join(" "),
                self.status_text(status),
                self.read(prog, self.api.log_size, self.api.log)
                    .map(|l| text(&l))
                    .unwrap_or_default()
            )))
        } else {
            let read = match output {
                Output::Ptx => self.read(prog, self.api.ptx_size, self.api.ptx),
                Output::Cubin => self.read(prog, self.api.cubin_size, self.api.cubin),
            };
            match read {
                Some(mut bytes) if !bytes.is_empty() => {
                    if output == Output::Ptx {
                        while bytes.last() == Some(&0) {
                            bytes.pop();
                        }
                    }
                    Ok(bytes)
                }
                _ => Err(fail(format!(
                    "NVRTC {}.{} made no {output:?} for {arch}",
                    self.version.0, self.version.1
                ))),
            }
        };
        // SAFETY: `prog` is not used after this.
        unsafe { (self.api.destroy)(&mut prog) };
        out
    }

    /// One of NVRTC's size-then-bytes results of `prog`, or `None` when NVRTC fails.
    fn read(
        &self,
        prog: Program,
        size: unsafe extern "C" fn(Program, *mut usize) -> Status,
        bytes: unsafe extern "C" fn(Program, *mut c_char) -> Status,
    ) -> Option<Vec<u8>> {
        let mut n = 0usize;
        // SAFETY: `prog` is live; the buffer has the size NVRTC reported.
        unsafe {
            if size(prog, &mut n) != 0 {
                return None;
            }
            let mut buf = vec![0u8; n];
            if n > 0 && bytes(prog, buf.as_mut_ptr() as *mut c_char) != 0 {
                return None;
            }
            Some(buf)
        }
    }

    /// NVRTC's name for a status code.
    fn status_text(&self, status: Status) -> String {
        // SAFETY: NVRTC returns a static string (or null).
        let p = unsafe { (self.api.error_string)(status) };
        if p.is_null() {
            format!("status {status}")
        } else {
            // SAFETY: non-null, NUL-terminated and static.
            unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
        }
    }
}

/// The NVRTC builtins libraries in the folder of `nvrtc` (none for a bare name, which the
/// loader resolves together with its builtins).
fn builtins_beside(nvrtc: &Path) -> Vec<PathBuf> {
    // An `.alt` NVRTC opens the `.alt` builtins.
    let alt = nvrtc
        .file_name()
        .is_some_and(|n| n.to_string_lossy().contains(".alt."));
    let Some(folder) = nvrtc.parent().filter(|f| !f.as_os_str().is_empty()) else {
        return Vec::new();
    };
    let Ok(entries) = std::fs::read_dir(folder) else {
        return Vec::new();
    };
    let mut found: Vec<PathBuf> = entries
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            let name = p.file_name().unwrap_or_default().to_string_lossy();
            let name = name.strip_prefix("lib").unwrap_or(&name);
            name.starts_with("nvrtc-builtins")
                && name.contains(".alt.") == alt
                && (name.contains(".so.") || name.ends_with(".dll"))
        })
        .collect();
    found.sort();
    found
}

/// The text of a NUL-terminated byte buffer.
fn text(bytes: &[u8]) -> String {
    let end = bytes.iter().position(|&b| b == 0).unwrap_or(bytes.len());
    String::from_utf8_lossy(&bytes[..end]).into_owned()
}

/// [`Nvrtc::candidates`] with the environment read through `var`.
fn candidates_from(var: impl Fn(&str) -> Option<OsString>) -> Vec<PathBuf> {
    if let Some(path) = var("KILN_NVRTC").filter(|p| !p.is_empty()) {
        return vec![PathBuf::from(path)];
    }
    let set = |name: &str| var(name).filter(|p| !p.is_empty()).map(PathBuf::from);
    let mut folders: Vec<PathBuf> = ["CUDA_HOME", "CUDA_PATH"]
        .iter()
        .filter_map(|v| set(v))
        .map(|root| root.join(if cfg!(windows) { "bin" } else { "lib64" }))
        .collect();
    if !cfg!(windows) {
        folders.extend(set("CONDA_PREFIX").map(|p| p.join("lib")));
        let home_local = set("HOME").map(|h| h.join(".local"));
        let prefixes = [set("VIRTUAL_ENV"), set("CONDA_PREFIX"), home_local]
            .into_iter()
            .flatten()
            .chain(["/usr/local", "/usr"].map(PathBuf::from));
        for prefix in prefixes {
            for packages in python_packages(&prefix.join("lib")) {
                folders.push(packages.join("nvidia/cu13/lib"));
                folders.push(packages.join("nvidia/cuda_nvrtc/lib"));
            }
        }
        folders.push(PathBuf::from("/usr/local/cuda/lib64"));
        let mut versioned: Vec<PathBuf> = std::fs::read_dir("/usr/local")
            .into_iter()
            .flatten()
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| {
                p.file_name()
                    .is_some_and(|n| n.to_string_lossy().starts_with("cuda-"))
            })
            .map(|p| p.join("lib64"))
            .collect();
        versioned.sort();
        folders.extend(versioned.into_iter().rev());
    }
    // By name on the loader's path first, then every file found in the folders.
    let mut found: Vec<(Option<u32>, PathBuf)> = NAMES
        .iter()
        .map(|(n, major)| (*major, PathBuf::from(n)))
        .collect();
    for folder in folders {
        for (name, major) in NAMES {
            let path = folder.join(name);
            if path.is_file() && !found.iter().any(|(_, p)| *p == path) {
                found.push((major, path));
            }
        }
    }
    // Newest major first, the bare name last; stable, so places keep their order.
    found.sort_by_key(|(major, _)| std::cmp::Reverse(major.map_or(0, |m| m + 1)));
    found.into_iter().map(|(_, p)| p).collect()
}

/// The `python3.*/site-packages` and `python3/dist-packages` folders under `lib`.
fn python_packages(lib: &Path) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = std::fs::read_dir(lib)
        .into_iter()
        .flatten()
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            p.file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with("python3"))
        })
        .flat_map(|p| [p.join("site-packages"), p.join("dist-packages")])
        .filter(|p| p.is_dir())
        .collect();
    out.sort();
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env<'a>(pairs: &'a [(&'a str, &'a str)]) -> impl Fn(&str) -> Option<OsString> + 'a {
        move |name| {
            pairs
                .iter()
                .find(|(k, _)| *k == name)
                .map(|(_, v)| OsString::from(v))
        }
    }

    #[test]
    fn kiln_nvrtc_is_the_only_place_when_set() {
        let got = candidates_from(env(&[
            ("KILN_NVRTC", "/x/libnvrtc.so.13"),
            ("CUDA_HOME", "/c"),
        ]));
        assert_eq!(got, vec![PathBuf::from("/x/libnvrtc.so.13")]);
    }

    #[cfg(not(windows))]
    #[test]
    fn names_come_newest_first_then_the_toolkit_folders() {
        let got = candidates_from(env(&[("CUDA_HOME", "/opt/cuda")]));
        // Folders that do not exist add nothing; names on the loader's path come first within
        // each major version, the bare name last.
        let names: Vec<PathBuf> = [
            "libnvrtc.so.13",
            "libnvrtc.alt.so.13",
            "libnvrtc.so.12",
            "libnvrtc.alt.so.12",
        ]
        .iter()
        .map(PathBuf::from)
        .collect();
        assert_eq!(&got[..2], &names[..2]);
        // Unversioned files last (the loader path's name, then any found in folders, such
        // as /usr/local/cuda-13/lib64/libnvrtc.so on a machine with a toolkit).
        let bare = got
            .iter()
            .position(|p| p.file_name().is_some_and(|n| n == "libnvrtc.so"));
        assert_eq!(bare.map(|i| &got[i]), Some(&PathBuf::from("libnvrtc.so")));
        assert!(
            got[bare.unwrap_or(0)..]
                .iter()
                .all(|p| p.file_name().is_some_and(|n| n == "libnvrtc.so")),
            "{got:?}"
        );
        let majors: Vec<u32> = got
            .iter()
            .map(|p| {
                let n = p.file_name().unwrap().to_string_lossy().into_owned();
                n.rsplit('.')
                    .next()
                    .and_then(|v| v.parse().ok())
                    .unwrap_or(0)
            })
            .collect();
        assert!(majors.windows(2).all(|w| w[0] >= w[1]), "{got:?}");
    }

    #[cfg(not(windows))]
    #[test]
    fn toolkit_and_wheel_folders_are_searched_newest_major_first() {
        let root = std::env::temp_dir().join(format!("kiln-nvrtc-places-{}", std::process::id()));
        let cuda12 = root.join("cuda12/lib64");
        let wheel = root.join("venv/lib/python3.12/site-packages/nvidia/cu13/lib");
        std::fs::create_dir_all(&cuda12).unwrap();
        std::fs::create_dir_all(&wheel).unwrap();
        std::fs::write(cuda12.join("libnvrtc.so.12"), b"").unwrap();
        std::fs::write(wheel.join("libnvrtc.so.13"), b"").unwrap();
        let (home, venv) = (root.join("cuda12"), root.join("venv"));
        let got = candidates_from(env(&[
            ("CUDA_HOME", home.to_str().unwrap()),
            ("VIRTUAL_ENV", venv.to_str().unwrap()),
        ]));
        let at = |p: &Path| got.iter().position(|g| g == p).unwrap_or(usize::MAX);
        let (w13, t12) = (
            at(&wheel.join("libnvrtc.so.13")),
            at(&cuda12.join("libnvrtc.so.12")),
        );
        assert!(
            w13 < t12,
            "the wheel's NVRTC 13 before the toolkit's 12: {got:?}"
        );
        assert!(t12 < at(Path::new("libnvrtc.so")), "{got:?}");
        let _ = std::fs::remove_dir_all(&root);
    }

    #[test]
    fn a_missing_file_is_unavailable_naming_it() {
        match Nvrtc::open("/nonexistent/libnvrtc.so.13") {
            Err(BackendError::Unavailable {
                library, reason, ..
            }) => {
                assert_eq!(library, NVRTC_LIBRARY);
                assert!(reason.contains("/nonexistent/libnvrtc.so.13"), "{reason}");
            }
            Err(e) => panic!("{e}"),
            Ok(_) => panic!("opened a file that does not exist"),
        }
    }
}
