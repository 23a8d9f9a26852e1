-- wrk script: GET a random team row by id (S3), ids 1..10 as in the demo database.
math.randomseed(os.time())
request = function()
  return wrk.format("GET", "/api/team/" .. math.random(1, 10))
end
