package main

import (
	"net"
	"net/http"
)

// serve starts h on a loopback port.
func serve(h http.Handler) (*listener, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	srv := &http.Server{Handler: h, ErrorLog: nil}
	go srv.Serve(ln)
	return &listener{srv: srv, url: "http://" + ln.Addr().String()}, nil
}
