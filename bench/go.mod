module github.com/idem-go/idem/bench

go 1.26

replace github.com/idem-go/idem => ..

require (
	github.com/go-resty/resty/v2 v2.17.2
	github.com/google/uuid v1.6.0
	github.com/hashicorp/go-retryablehttp v0.7.8
	github.com/idem-go/idem v0.1.0
	go.etcd.io/bbolt v1.4.3
)

require (
	github.com/hashicorp/go-cleanhttp v0.5.2 // indirect
	golang.org/x/net v0.43.0 // indirect
	golang.org/x/sys v0.45.0 // indirect
)
