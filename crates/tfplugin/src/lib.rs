//! tfplugin: placeholder, filled by its issue.
