//! The rules watchmux copies from Go and from the Kubernetes API server's
//! Go code, in one home: where kube-apiserver reads or writes a value with a
//! Go standard-library function, watchmux must read or write it the same way
//! (a pair Go drops from a query is invisible to the API server, so watchmux
//! must not act on it either), and one parser per rule keeps the copies from
//! drifting apart.
//!
//! Each file's doc names the Go function and the version it mirrors:
//!
//! - [`duration`], `time.ParseDuration`;
//! - [`fmt`], `strconv.Quote` (`%q`) and `%v` of a float;
//! - [`rfc3339`], `time.Parse(time.RFC3339, …)` and `Time.AddDate`;
//! - [`net`], `net.SplitHostPort` as `net.Listen` reads a listen address
//!   (`:6443`: every address);
//! - [`strconv`], `strconv.ParseUint` and `ParseInt` of a query's integers,
//!   `strconv.ParseBool` of a boolean flag's value;
//! - [`url_query`], `url.ParseQuery` as `URL.Query()` calls it.
//!
//! The API server's own rules built on these (request classification,
//! selectors, content negotiation, continue tokens) stay with the modules
//! that apply them, each naming the Go function it follows.

pub(crate) mod duration;
pub(crate) mod fmt;
pub(crate) mod net;
pub(crate) mod rfc3339;
pub(crate) mod strconv;
pub(crate) mod url_query;
