//! The watch cache: one upstream list+watch per resource, served to many.

pub mod history;
