//! Table names on the wire: Flight `PATH` descriptors and `DoGet` tickets (docs/SERVICE.md,
//! "Table names").

use iceberg::{NamespaceIdent, TableIdent};

use crate::catalog::names::check_name;
use crate::error::Error;

/// The namespace of a one-element path.
pub const DEFAULT_NAMESPACE: &str = "default";

/// The table named by a Flight `PATH` descriptor `[ns..., table]`; one element means
/// namespace [`DEFAULT_NAMESPACE`].
///
/// # Errors
/// [`Error::BadName`] for an empty path, or a name the catalog's rule refuses
/// ([`check_name`]: too many levels, an element that is not `[A-Za-z0-9_-]+` or too
/// long), quoting the element.
pub fn table_from_path(path: &[String]) -> Result<TableIdent, Error> {
    let Some((name, namespace)) = path.split_last() else {
        return Err(Error::BadName {
            reason: "the descriptor path is empty; give [namespace..., table]".to_string(),
        });
    };
    check_name(namespace.iter().map(String::as_str), Some(name))
        .map_err(|reason| Error::BadName { reason })?;
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
