module github.com/idem-go/idem/queue/powercut

go 1.26

require (
	github.com/hanwen/go-fuse/v2 v2.12.1
	github.com/idem-go/idem v0.1.0
	github.com/stretchr/testify v1.12.1
)

require (
	github.com/google/uuid v1.6.0 // indirect
	go.etcd.io/bbolt v1.4.3 // indirect
	go.yaml.in/yaml/v3 v3.0.5 // indirect
	golang.org/x/sys v0.29.0 // indirect
)

replace github.com/idem-go/idem => ../..
