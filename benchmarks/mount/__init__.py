"""The scratch mount against bindfs and the plain directory: benchmark and pjdfstest conformance."""
