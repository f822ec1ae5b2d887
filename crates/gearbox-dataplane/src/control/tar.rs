//! Reading a policy artifact: the uncompressed tar the registry stores
//! (`gearbox control policy push` packs a folder's regular files, POSIX ustar headers with
//! PAX extended headers where a name needs one). Only plain files with relative names are
//! taken; links, devices, absolute names and `..` are refused, as on the service's side.
//! Rejected alternative: the `tar` crate, a dependency for the forty lines a reader of
//! plain files needs.

use std::collections::BTreeMap;

const BLOCK: usize = 512;
/// As many files as the registry takes in one artifact.
const MAX_FILES: usize = 256;

fn octal(field: &[u8], what: &str) -> Result<u64, String> {
    let text: String = field
        .iter()
        .take_while(|&&b| b != 0)
        .map(|&b| b as char)
        .collect::<String>()
        .trim()
        .to_string();
    if text.is_empty() {
        return Ok(0);
    }
    u64::from_str_radix(&text, 8).map_err(|_| format!("{what}: not an octal number: {text:?}"))
}

fn text(field: &[u8]) -> String {
    String::from_utf8_lossy(&field[..field.iter().position(|&b| b == 0).unwrap_or(field.len())]).into_owned()
}

/// The `path` of a PAX extended header's records (`LEN path=NAME\n`...).
fn pax_path(data: &[u8]) -> Result<Option<String>, String> {
    let mut rest = data;
    let mut path = None;
    while !rest.is_empty() {
        let sp = rest.iter().position(|&b| b == b' ').ok_or("PAX header: no length")?;
        let len: usize = std::str::from_utf8(&rest[..sp])
            .ok()
            .and_then(|s| s.parse().ok())
            .ok_or("PAX header: bad length")?;
        if len <= sp + 1 || len > rest.len() {
            return Err("PAX header: bad length".into());
        }
        let record = &rest[sp + 1..len - 1];
        if let Some(v) = record.strip_prefix(b"path=") {
            path = Some(String::from_utf8(v.to_vec()).map_err(|_| "PAX header: path is not UTF-8")?);
        }
        rest = &rest[len..];
    }
    Ok(path)
}

/// The files of a tar archive, by relative name.
pub fn unpack(data: &[u8]) -> Result<BTreeMap<String, Vec<u8>>, String> {
    let mut files = BTreeMap::new();
    let mut at = 0;
    let mut next_name: Option<String> = None;
    loop {
        let header = data
            .get(at..at + BLOCK)
            .ok_or_else(|| format!("not a tar archive: truncated at byte {at}"))?;
        if header.iter().all(|&b| b == 0) {
            break;
        }
        let sum = octal(&header[148..156], "header checksum")?;
        let actual: u64 = header
            .iter()
            .enumerate()
            .map(|(i, &b)| if (148..156).contains(&i) { 32 } else { u64::from(b) })
            .sum();
        if sum != actual {
            return Err(format!("not a tar archive: header checksum mismatch at byte {at}"));
        }
        let size = usize::try_from(octal(&header[124..136], "size")?).map_err(|_| "size too large")?;
        let kind = header[156];
        let start = at + BLOCK;
        let content = data
            .get(start..start + size)
            .ok_or_else(|| format!("not a tar archive: a member's data is truncated at byte {start}"))?;
        at = start + size.div_ceil(BLOCK) * BLOCK;
        match kind {
            b'x' => {
                next_name = pax_path(content)?;
                continue;
            }
            b'g' => continue,
            b'0' | 0 => {}
            _ => {
                return Err(format!(
                    "{}: only plain files with relative names are allowed",
                    text(&header[0..100])
                ))
            }
        }
        let name = match next_name.take() {
            Some(n) => n,
            None => {
                let prefix = text(&header[345..500]);
                let name = text(&header[0..100]);
                if &header[257..262] == b"ustar" && !prefix.is_empty() {
                    format!("{prefix}/{name}")
                } else {
                    name
                }
            }
        };
        if name.is_empty() || name.starts_with('/') || name.split('/').any(|p| p == "..") {
            return Err(format!("{name}: only plain files with relative names are allowed"));
        }
        if files.len() >= MAX_FILES {
            return Err(format!("more than {MAX_FILES} files"));
        }
        files.insert(name, content.to_vec());
    }
    if files.is_empty() {
        return Err("the artifact holds no files".into());
    }
    Ok(files)
}

/// A ustar archive of `files` (tests only: the registry's own packer makes the real ones).
#[cfg(test)]
pub(crate) fn pack(files: &[(&str, &[u8])]) -> Vec<u8> {
    let mut out = Vec::new();
    for (name, data) in files {
        let mut h = [0u8; BLOCK];
        h[..name.len()].copy_from_slice(name.as_bytes());
        h[100..107].copy_from_slice(b"0000644");
        h[108..115].copy_from_slice(b"0000000");
        h[116..123].copy_from_slice(b"0000000");
        h[124..135].copy_from_slice(format!("{:011o}", data.len()).as_bytes());
        h[136..147].copy_from_slice(b"00000000000");
        h[156] = b'0';
        h[257..263].copy_from_slice(b"ustar\0");
        h[263..265].copy_from_slice(b"00");
        h[148..156].copy_from_slice(b"        ");
        let sum: u32 = h.iter().map(|&b| u32::from(b)).sum();
        h[148..155].copy_from_slice(format!("{sum:06o}\0").as_bytes());
        out.extend_from_slice(&h);
        out.extend_from_slice(data);
        out.resize(out.len().div_ceil(BLOCK) * BLOCK, 0);
    }
    out.resize(out.len() + 2 * BLOCK, 0);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn files_come_back_by_name() {
        let tar = pack(&[("cwnd.toml", b"version = 1\n"), ("sub/a.meta.json", b"{}")]);
        let files = unpack(&tar).unwrap();
        assert_eq!(files["cwnd.toml"], b"version = 1\n");
        assert_eq!(files["sub/a.meta.json"], b"{}");
    }

    #[test]
    fn damaged_or_escaping_archives_are_refused() {
        let mut tar = pack(&[("cwnd.toml", b"version = 1\n")]);
        tar[3] ^= 1;
        assert!(unpack(&tar).unwrap_err().contains("checksum"));
        let tar = pack(&[("../etc/x", b"x")]);
        assert!(unpack(&tar).unwrap_err().contains("relative"));
        let tar = pack(&[("a", &[7u8; 600])]);
        assert!(unpack(&tar[..900]).unwrap_err().contains("truncated"));
        assert!(unpack(&[0u8; 1024]).unwrap_err().contains("no files"));
        assert!(unpack(b"hello").is_err());
    }

    #[test]
    fn a_pax_header_names_the_next_file() {
        let long = "d/".repeat(60) + "model.json";
        let record = format!("path={long}\n");
        let len = record.len() + 4; // "NNN " with a 3-digit length
        let pax = format!("{len} {record}");
        assert_eq!(pax.len(), len);
        let mut tar = pack(&[("PaxHeader", pax.as_bytes()), ("short", b"{}")]);
        tar[156] = b'x';
        // Fix the first header's checksum after changing its type.
        tar[148..156].copy_from_slice(b"        ");
        let sum: u32 = tar[..BLOCK].iter().map(|&b| u32::from(b)).sum();
        tar[148..155].copy_from_slice(format!("{sum:06o}\0").as_bytes());
        let files = unpack(&tar).unwrap();
        assert_eq!(files.keys().collect::<Vec<_>>(), vec![&long]);
    }
}
