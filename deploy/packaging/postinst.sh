#!/bin/sh
# Creates the unprivileged user the units run as; does not start anything:
# enable the unit once its configuration is in /etc/multiplane.
set -e
if ! getent passwd multiplane >/dev/null; then
	adduser --system --group --home /var/lib/multiplane --no-create-home --quiet multiplane
fi
if [ -d /run/systemd/system ]; then
	systemctl daemon-reload >/dev/null || true
fi
