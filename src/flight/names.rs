//! Table names on the wire: Flight `PATH` descriptors and `DoGet` tickets (docs/SERVICE.md,
//! "Table names").

use iceberg::{NamespaceIdent, TableIdent};

use crate::error::Error;

/// The namespace of a one-element path.
pub const DEFAULT_NAMESPACE: &str = "default";

/// The longest name element (a namespace level or a table name), in bytes. Each element
/// is a directory name under the warehouse, and file systems hold at most 255 bytes per
/// name; 128 leaves room and keeps paths well under `PATH_MAX` with [`MAX_NAMESPACE_DEPTH`].
pub const MAX_NAME_BYTES: usize = 128;

/// The most namespace levels a table name may have.
pub const MAX_NAMESPACE_DEPTH: usize = 8;

/// The table named by a Flight `PATH` descriptor `[ns..., table]`; one element means
/// namespace [`DEFAULT_NAMESPACE`].
///
/// # Errors
/// [`Error::BadName`] for an empty path, more than [`MAX_NAMESPACE_DEPTH`] namespace
/// levels, or an element that is not `[A-Za-z0-9_-]+` (empty, `..`, `/`, NUL, spaces, …)
/// or longer than [`MAX_NAME_BYTES`], quoting the element.
pub fn table_from_path(path: &[String]) -> Result<TableIdent, Error> {
    let Some((name, namespace)) = path.split_last() else {
        return Err(Error::BadName {
            reason: "the descriptor path is empty; give [namespace..., table]".to_string(),
        });
    };
    if namespace.len() > MAX_NAMESPACE_DEPTH {
        return Err(Error::BadName {
            reason: format!(
                "the namespace has {} levels; at most {MAX_NAMESPACE_DEPTH} are allowed",
                namespace.len()
            ),
        });
    }
    for element in path {
        check_element(element)?;
    }
    let namespace = if namespace.is_empty() {
        vec![DEFAULT_NAMESPACE.to_string()]
    } else {
        namespace.to_vec()
    };
    let namespace = NamespaceIdent::from_vec(namespace).map_err(|e| Error::BadName {
        reason: e.to_string(),
    })?;
    Ok(TableIdent::new(namespace, name.clone()))
}

/// Checks one name element against `[A-Za-z0-9_-]+` and [`MAX_NAME_BYTES`].
///
/// # Errors
/// [`Error::BadName`] quoting the element (its first 32 bytes when it is too long).
pub fn check_element(element: &str) -> Result<(), Error> {
    if element.len() > MAX_NAME_BYTES {
        let head: String = element.chars().take(32).collect();
        return Err(Error::BadName {
            reason: format!(
                "\"{head}...\" is {} bytes long; a namespace level or table name holds at \
                 most {MAX_NAME_BYTES}",
                element.len()
            ),
        });
    }
    let ok = !element.is_empty()
        && element
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
    if ok {
        Ok(())
    } else {
        Err(Error::BadName {
            reason: format!("{element:?} is not a name of [A-Za-z0-9_-]+"),
        })
    }
}

/// The `PATH` of `ident`: namespace elements then the table name.
pub fn path_of(ident: &TableIdent) -> Vec<String> {
    let mut path = ident.namespace().as_ref().clone();
    path.push(ident.name().to_string());
    path
}

/// The `DoGet` ticket of `ident`: its path joined by `.` (names cannot contain `.`).
pub fn ticket_of(ident: &TableIdent) -> Vec<u8> {
    path_of(ident).join(".").into_bytes()
}

/// The table a ticket from [`ticket_of`] names.
///
/// # Errors
/// [`Error::BadRequest`] when the ticket is not UTF-8; [`Error::BadName`] as
/// [`table_from_path`].
pub fn table_from_ticket(ticket: &[u8]) -> Result<TableIdent, Error> {
    let text = std::str::from_utf8(ticket).map_err(|_| Error::BadRequest {
        reason: "the ticket is not a skade table ticket (not UTF-8)".to_string(),
    })?;
    let path: Vec<String> = text.split('.').map(str::to_string).collect();
    if path.len() < 2 {
        return Err(Error::BadRequest {
            reason: format!("the ticket {text:?} is not a skade table ticket"),
        });
    }
    table_from_path(&path)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn path(p: &[&str]) -> Vec<String> {
        p.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn single_element_means_default_namespace() {
        let ident = table_from_path(&path(&["flights"])).unwrap();
        assert_eq!(ident.to_string(), "default.flights");
    }

    #[test]
    fn bad_elements_are_rejected() {
        for bad in [
            &["a", ".."][..],
            &["a/b"],
            &[""],
            &["x\0"],
            &["ns", "bad name"],
            &[],
        ] {
            assert!(
                matches!(table_from_path(&path(bad)), Err(Error::BadName { .. })),
                "{bad:?} was accepted"
            );
        }
    }

    /// A name the file system cannot hold is refused before anything is created.
    #[test]
    fn long_names_and_deep_namespaces_are_refused_naming_the_limit() {
        let long = "x".repeat(300);
        let err = table_from_path(&path(&["ns", &long])).unwrap_err();
        assert!(err.to_string().contains("at most 128"), "{err}");
        assert!(table_from_path(&path(&["ns", &"x".repeat(128)])).is_ok());
        let deep: Vec<&str> = std::iter::repeat_n("n", 9).chain(["t"]).collect();
        let err = table_from_path(&path(&deep)).unwrap_err();
        assert!(err.to_string().contains("at most 8"), "{err}");
    }

    #[test]
    fn tickets_round_trip() {
        let ident = table_from_path(&path(&["a", "b-c", "t_1"])).unwrap();
        assert_eq!(table_from_ticket(&ticket_of(&ident)).unwrap(), ident);
    }
}
