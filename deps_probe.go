package main

import (
	_ "github.com/gin-gonic/gin"
	_ "github.com/golang-migrate/migrate/v4"
	_ "github.com/golang-migrate/migrate/v4/database/pgx/v5"
	_ "github.com/golang-migrate/migrate/v4/source/iofs"
	_ "github.com/jackc/pgx/v5/pgxpool"
	_ "github.com/openconfig/gnmi/cache"
	_ "github.com/openconfig/gnmi/proto/gnmi"
	_ "github.com/openconfig/gnmi/subscribe"
	_ "github.com/prometheus/client_golang/prometheus"
	_ "go.etcd.io/etcd/client/v3"
	_ "go.etcd.io/etcd/client/v3/concurrency"
	_ "go.etcd.io/etcd/server/v3/embed"
	_ "go.uber.org/goleak"
	_ "go.yaml.in/yaml/v3"
	_ "golang.org/x/net/ipv4"
	_ "golang.org/x/sys/unix"
)

func main() {}
