//! Reading a serde type from a TOML file with errors that name the file, the line,
//! the column and the field (the guide's "bad input" rule), for every configuration
//! file gearbox takes: the edge's (`gearbox edge --config`) and the transport gear's
//! (`gearbox load --gear-config`).

use std::path::{Path, PathBuf};

use serde::de::DeserializeOwned;

/// A TOML file that cannot be used, with where and why.
#[derive(Debug, thiserror::Error)]
pub enum TomlFileError {
    /// The file could not be read.
    #[error("cannot read config file {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The file is not valid TOML or has a bad or unknown field.
    #[error("{path}:{line}:{column}: {message}")]
    Parse {
        /// The file.
        path: PathBuf,
        /// 1-based line of the error (0: the parser gave no position).
        line: usize,
        /// 1-based column.
        column: usize,
        /// The parser's message, which names the field.
        message: String,
    },
}

/// 1-based line and column of a byte offset in `text` (an offset inside a multi-byte
/// character counts as that character).
pub fn line_column(text: &str, offset: usize) -> (usize, usize) {
    let mut end = offset.min(text.len());
    while end > 0 && !text.is_char_boundary(end) {
        end -= 1;
    }
    let before = &text[..end];
    let line = before.matches('\n').count() + 1;
    let column = before.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
    (line, column)
}

/// Parses TOML text into `T`; `path` is only used in error messages.
pub fn from_toml<T: DeserializeOwned>(text: &str, path: &Path) -> Result<T, TomlFileError> {
    toml::from_str(text).map_err(|e| {
        let (line, column) = e.span().map_or((0, 0), |s| line_column(text, s.start));
        TomlFileError::Parse {
            path: path.into(),
            line,
            column,
            message: e.message().trim().to_string(),
        }
    })
}

/// Reads and parses a TOML file into `T`.
pub fn read<T: DeserializeOwned>(path: &Path) -> Result<T, TomlFileError> {
    let text = std::fs::read_to_string(path).map_err(|source| TomlFileError::Read {
        path: path.into(),
        source,
    })?;
    from_toml(&text, path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, serde::Deserialize)]
    #[serde(deny_unknown_fields)]
    #[allow(dead_code)] // read only through Debug
    struct Conf {
        rate: u32,
    }

    #[test]
    fn an_unknown_field_is_named_with_its_line_and_column() {
        let err = from_toml::<Conf>("rate = 1\n  speed = 2\n", Path::new("x.toml")).unwrap_err();
        let msg = err.to_string();
        assert!(msg.starts_with("x.toml:2:3: "), "{msg}");
        assert!(msg.contains("speed"), "{msg}");
    }

    #[test]
    fn a_wrong_type_is_named() {
        let msg = from_toml::<Conf>("rate = \"fast\"\n", Path::new("y.toml"))
            .unwrap_err()
            .to_string();
        assert!(msg.starts_with("y.toml:1:8: "), "{msg}");
    }

    #[test]
    fn a_missing_file_names_the_file() {
        let msg = read::<Conf>(Path::new("/nonexistent/gear.toml"))
            .unwrap_err()
            .to_string();
        assert!(msg.contains("/nonexistent/gear.toml"), "{msg}");
    }

    #[test]
    fn line_column_counts_characters_and_survives_a_split_character() {
        assert_eq!(line_column("ab\ncé", 6), (2, 3));
        assert_eq!(line_column("ab\ncé", 5), (2, 2)); // inside é
        assert_eq!(line_column("", 10), (1, 1));
    }
}
