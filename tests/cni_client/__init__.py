"""Tests of the vswitch-cni plugin executable (cni_client/)."""
