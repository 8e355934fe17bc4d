//! The ring-buffer history of events with the API server's dynamic capacity.
