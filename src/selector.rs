//! Label and field selectors: parsing, matching, and the per-kind field tables.
