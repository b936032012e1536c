//! The nocloud crate's integration tests, in one test binary (one link instead of four).
//! `common` finds and runs the external tools (xorriso, bsdtar, blkid, cloud-init) the
//! other modules check our images with.

mod common;

mod cloud_init;
mod external_tools;
mod golden;
mod vendor_script;
