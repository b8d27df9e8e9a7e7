module github.com/trustplane/trustplane/deploy

go 1.26.0
