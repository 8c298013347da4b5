#!/bin/sh
# Creates the unprivileged user the units run as; does not start anything:
# enable the unit once its configuration is in /etc/multiplane.
set -e
if ! getent passwd multiplane >/dev/null; then
	adduser --system --group --home /var/lib/multiplane --no-create-home --quiet multiplane
fi
# The state directories exist before the unit first starts, so that
# `sudo -u multiplane endpoint enroll --state-dir /var/lib/multiplane/endpoint`
# works on a fresh install (systemd's StateDirectory= acts only at start).
install -d -o multiplane -g multiplane -m 0755 /var/lib/multiplane
for d in endpoint fabricd; do
	install -d -o multiplane -g multiplane -m 0700 "/var/lib/multiplane/$d"
done
if [ -d /run/systemd/system ]; then
	systemctl daemon-reload >/dev/null || true
fi
