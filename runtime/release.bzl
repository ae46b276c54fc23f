"""Tessel's release number: the one place it is written.

runtime/version.h gets it as the TESSEL_RELEASE define (runtime:version), the
wheel's file name and METADATA get it from here (python:wheel), and the OCI
images read it from the binaries' --version (deploy/image/build.sh). Bump it
with the image tags in deploy/.
"""

TESSEL_RELEASE = "0.1.0"
