//! The names skade gives tables and namespaces (docs/SERVICE.md, "Table names"): each
//! element is a directory under the warehouse, so only `[A-Za-z0-9_-]+`, at most
//! [`MAX_NAME_BYTES`] bytes, and at most [`MAX_NAMESPACE_DEPTH`] namespace levels —
//! `..`, `/`, NUL and the like never reach a path. Flight's descriptors and the REST
//! catalog's creates follow the same rule.

/// The longest name element (a namespace level or a table name), in bytes. Each element
/// is a directory name under the warehouse, and file systems hold at most 255 bytes per
/// name; 128 leaves room and keeps paths well under `PATH_MAX` with [`MAX_NAMESPACE_DEPTH`].
pub const MAX_NAME_BYTES: usize = 128;

/// The most namespace levels a table name may have.
pub const MAX_NAMESPACE_DEPTH: usize = 8;

/// Checks one name element against `[A-Za-z0-9_-]+` and [`MAX_NAME_BYTES`].
///
/// # Errors
/// What is wrong, quoting the element (its first 32 bytes when it is too long).
pub fn check_element(element: &str) -> Result<(), String> {
    if element.len() > MAX_NAME_BYTES {
        let head: String = element.chars().take(32).collect();
        return Err(format!(
            "\"{head}...\" is {} bytes long; a namespace level or table name holds at \
             most {MAX_NAME_BYTES}",
            element.len()
        ));
    }
    let ok = !element.is_empty()
        && element
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
    if ok {
        Ok(())
    } else {
        Err(format!("{element:?} is not a name of [A-Za-z0-9_-]+"))
    }
}

/// Checks a namespace's levels (and a table name in it, when given): at most
/// [`MAX_NAMESPACE_DEPTH`] levels, each element as [`check_element`].
///
/// # Errors
/// What is wrong, naming the element or the depth.
pub fn check_name<'a>(
    namespace: impl ExactSizeIterator<Item = &'a str>,
    table: Option<&'a str>,
) -> Result<(), String> {
    if namespace.len() > MAX_NAMESPACE_DEPTH {
        return Err(format!(
            "the namespace has {} levels; at most {MAX_NAMESPACE_DEPTH} are allowed",
            namespace.len()
        ));
    }
    for element in namespace.chain(table) {
        check_element(element)?;
    }
    Ok(())
}
