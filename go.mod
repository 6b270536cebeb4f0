module github.com/queen-go/queen

go 1.26

require github.com/google/go-querystring v1.2.0
