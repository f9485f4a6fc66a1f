//! What the interposer's ELF needs of glibc, read before npud installs it: glibc's loader
//! preloads it into every process of every allocated container (`/etc/ld.so.preload`),
//! and a library that needs a symbol version the image's glibc lacks makes each of those
//! processes exit at once ("version 'GLIBC_2.34' not found"), the image's own programs
//! included. So an interposer that needs a glibc newer than the oldest the cluster's
//! images have (`[kubernetes] interposer_glibc`, 2.17 by default: the build
//! `scripts/old-glibc.sh` makes) is refused, naming the symbol.

use object::read::elf::{FileHeader, Sym};
use object::{Endianness, FileKind, elf};

use crate::config::kubernetes::parse_glibc as parse_version;

/// The symbols `bytes` (an ELF shared object) imports at a glibc version newer than
/// `floor`, each as `name@GLIBC_x.y`; an error for a file that is no ELF npud can read.
pub fn newer_than(bytes: &[u8], floor: &[u32]) -> Result<Vec<String>, String> {
    match FileKind::parse(bytes).map_err(|e| format!("not an ELF file: {e}"))? {
        FileKind::Elf64 => imports::<elf::FileHeader64<Endianness>>(bytes, floor),
        FileKind::Elf32 => imports::<elf::FileHeader32<Endianness>>(bytes, floor),
        other => Err(format!("not an ELF shared object ({other:?})")),
    }
}

fn imports<Elf: FileHeader<Endian = Endianness>>(bytes: &[u8], floor: &[u32]) -> Result<Vec<String>, String> {
    let bad = |e: object::Error| format!("an unreadable ELF file: {e}");
    let header = Elf::parse(bytes).map_err(bad)?;
    let endian = header.endian().map_err(bad)?;
    let sections = header.sections(endian, bytes).map_err(bad)?;
    let symbols = sections.symbols(endian, bytes, elf::SHT_DYNSYM).map_err(bad)?;
    let Some(versions) = sections.versions(endian, bytes).map_err(bad)? else { return Ok(Vec::new()) };
    let mut newer = Vec::new();
    for (index, symbol) in symbols.enumerate() {
        if !symbol.is_undefined(endian) {
            continue;
        }
        let Ok(Some(version)) = versions.version(versions.version_index(endian, index).index()) else { continue };
        let version = String::from_utf8_lossy(version.name());
        let needed = version.strip_prefix("GLIBC_").and_then(parse_version);
        if needed.is_some_and(|v| v.as_slice() > floor) {
            let name = symbols.symbol_name(endian, symbol).map(String::from_utf8_lossy).unwrap_or_default();
            newer.push(format!("{name}@{version}"));
        }
    }
    newer.sort();
    newer.dedup();
    Ok(newer)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_compare_as_glibc_numbers_them() {
        assert!(parse_version("2.34").unwrap() > parse_version("2.17").unwrap());
        assert!(parse_version("2.3.4").unwrap() < parse_version("2.17").unwrap());
        assert_eq!(parse_version("2"), None);
        assert_eq!(parse_version("2.x"), None);
    }

    /// This test binary is an ELF linked against the machine's glibc: it imports symbols
    /// at some version above 2.0 (every glibc since 2.1 versions them), and none above
    /// 99.0; garbage is refused.
    #[test]
    fn a_real_elf_is_read_and_garbage_refused() {
        let me = std::fs::read("/proc/self/exe").unwrap();
        assert!(!newer_than(&me, &[2, 0]).unwrap().is_empty());
        assert!(newer_than(&me, &[99, 0]).unwrap().is_empty());
        assert!(newer_than(b"release one", &[2, 17]).unwrap_err().contains("not an ELF"));
    }
}
